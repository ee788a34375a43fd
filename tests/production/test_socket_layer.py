"""A run's socket on the real channel layer (channels_redis) when Redis falters while it joins
the run's group: it tries again and then works, rather than closing."""

from __future__ import annotations

import pytest
import redis.exceptions
from channels_redis.core import RedisChannelLayer
from django.conf import settings as django_settings

from orchestrator import events, wire
from tests.webui.test_consumers import communicator_for, new_run, publish

pytestmark = [
    pytest.mark.production,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]


class FalteringLayer(RedisChannelLayer):
    """channels_redis on the real Redis, whose first ``failures`` joins of a run's group time
    out as a crowd of sockets connecting at once made them do (``redis.exceptions.TimeoutError``)."""

    failures = 0

    async def group_add(self, group: str, channel: str) -> None:
        if group.startswith("run.") and FalteringLayer.failures > 0:
            FalteringLayer.failures -= 1
            raise redis.exceptions.TimeoutError("Timeout connecting to server")
        await super().group_add(group, channel)


@pytest.fixture
def faltering_layer(settings):
    # The configured layer (its hosts and timeouts) with the faltering class.
    layer = {**django_settings.CHANNEL_LAYERS["default"], "BACKEND": f"{__name__}.FalteringLayer"}
    settings.CHANNEL_LAYERS = {"default": layer}  # channels resets its layers on the change
    yield FalteringLayer
    FalteringLayer.failures = 0


async def test_a_socket_whose_group_join_times_out_tries_again_and_sees_live_events(
    faltering_layer, sim_pool, viewer
):
    run = await new_run(sim_pool)
    faltering_layer.failures = 2
    communicator = communicator_for(run.pk, viewer)
    try:
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        snapshot = await communicator.receive_json_from(timeout=10)
        assert snapshot["type"] == wire.SNAPSHOT
        live = await publish(run.pk, "planning")
        assert await communicator.receive_json_from(timeout=10) == live
    finally:
        await communicator.disconnect()
    assert faltering_layer.failures == 0
    assert events.group_name(run.pk).startswith("run.")


async def test_a_socket_whose_group_join_keeps_failing_is_closed_with_1011(
    faltering_layer, sim_pool, viewer
):
    run = await new_run(sim_pool)
    faltering_layer.failures = 100
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect(timeout=10)
        output = await communicator.receive_output(timeout=30)
    finally:
        await communicator.disconnect()
    assert output == {"type": "websocket.close", "code": 1011}
