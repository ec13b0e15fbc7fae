"""The live stream: one consumer, one group ("calls") fed by the recorder after each commit.

Messages to the browser: {"type": "calls/batch", "payload": [call, ...]} (decisions left
out), and {"type": "reset"} to make the client refetch. Unauthenticated or unauthorised
connections are closed with code 4401/4403.
"""
from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from extproxy.recorder import LIVE_GROUP


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await self._may_view(user):
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(LIVE_GROUP, self.channel_name)
        await self.accept()
        await self.send_json({"type": "reset"})

    async def disconnect(self, code):
        await self.channel_layer.group_discard(LIVE_GROUP, self.channel_name)

    async def calls_batch(self, event):
        calls = event["calls"]
        if len(calls) == 1:
            await self.send_json({"type": "calls/add", "payload": calls[0]})
        else:
            await self.send_json({"type": "calls/batch", "payload": calls})

    @staticmethod
    async def _may_view(user) -> bool:
        from channels.db import database_sync_to_async

        return await database_sync_to_async(user.has_perm)("extproxy.view_call")
