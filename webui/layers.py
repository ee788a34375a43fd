"""The channel layer on Redis: channels_redis's, with a group send that costs one Redis command
when nobody is in the group.

channels_redis sends to a group with two commands before it reaches any member (drop the
members that joined longer than ``group_expiry`` ago, then read the members), then one pipeline
and one script for the members. Most runs execute with nobody watching them live (experiments,
runs created over the API), and each of their steps sends a few group messages. Here a send
first counts the group's members: none, and it is done; else channels_redis's send follows (one
command more than its own), which drops the members past ``group_expiry`` as it always did.
"""

from __future__ import annotations

from typing import Any

from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer


class RedisChannelLayer(ChannelsRedisLayer):
    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        connection = self.connection(self.consistent_hash(group))
        if await connection.zcard(self._group_key(group)):
            await super().group_send(group, message)
