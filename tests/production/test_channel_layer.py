"""The site's channel layer on the real Redis (``webui/layers.py``): a group send reaches the
group's members, never one that joined longer than ``group_expiry`` ago (dropped at the send,
as channels_redis does), and a group nobody is in gets nothing stored."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from channels.layers import get_channel_layer

from webui.layers import RedisChannelLayer

pytestmark = pytest.mark.production


async def test_a_group_send_reaches_members_and_drops_those_past_the_group_expiry():
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    group = f"run.test-{uuid.uuid4().hex}"
    fresh, stale = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(group, fresh)
    await layer.group_add(group, stale)
    key = layer._group_key(group)
    connection = layer.connection(layer.consistent_hash(group))
    # The stale member joined longer ago than the group keeps its members.
    await connection.zadd(key, {stale: int(time.time()) - layer.group_expiry - 60})

    await layer.group_send(group, {"type": "run.event", "n": 1})

    assert (await asyncio.wait_for(layer.receive(fresh), 5))["n"] == 1
    assert [member.decode() for member in await connection.zrange(key, 0, -1)] == [fresh]
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(layer.receive(stale), 0.5)
    await layer.group_discard(group, fresh)


async def test_a_group_nobody_is_in_gets_nothing_stored():
    layer = get_channel_layer()
    group = f"run.test-{uuid.uuid4().hex}"
    connection = layer.connection(layer.consistent_hash(group))

    await layer.group_send(group, {"type": "run.event", "n": 1})

    # Nothing under the group's name (other tests' keys come and go in this database).
    assert await connection.keys(f"*{group}*") == []
    assert await connection.exists(layer._group_key(group)) == 0
