"""The Channels tutorial's chat room, as the docs write it (async version): every socket joins
the room's group, each message is one `group_send`, and each consumer `json.dumps` and `send`s
it to its own socket. The baseline QIM's room fan-out is compared against.

Two departures, both for the benchmark: no AuthMiddlewareStack (no sessions or database:
receivers are anonymous), and the counters below, which the two-node run reads to count
channel-layer messages (`layer_received` is one per member per room message).
"""

from __future__ import annotations

import json
from collections import Counter

from channels.generic.websocket import AsyncWebsocketConsumer

COUNTERS: Counter[str] = Counter()


class ChatConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.room_name = self.scope["url_route"]["kwargs"]["room_name"]
        self.room_group_name = f"chat_{self.room_name}"
        await self.channel_layer.group_add(self.room_group_name, self.channel_name)
        await self.accept()
        COUNTERS["connections"] += 1

    async def disconnect(self, close_code: int) -> None:
        await self.channel_layer.group_discard(self.room_group_name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        message = json.loads(text_data or "{}")["message"]
        COUNTERS["group_send"] += 1
        await self.channel_layer.group_send(self.room_group_name, {"type": "chat.message", "message": message})

    async def chat_message(self, event: dict) -> None:
        COUNTERS["layer_received"] += 1
        await self.send(text_data=json.dumps({"message": event["message"]}))
