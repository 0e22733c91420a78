"""ASGI module of the tutorial-room baseline: `bench.baselines.tutorial_asgi:application`.

/ws/chat/<room>/ is the tutorial consumer; any HTTP GET answers the counters as JSON (the
benchmark's health check and how it reads them).
"""

import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.baselines.tutorial_settings")

import django  # noqa: E402

django.setup()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.baselines.tutorial_room import COUNTERS, ChatConsumer  # noqa: E402


async def counters_app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    body = json.dumps(dict(COUNTERS)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


application = ProtocolTypeRouter(
    {
        "http": counters_app,
        "websocket": URLRouter([path("ws/chat/<str:room_name>/", ChatConsumer.as_asgi())]),
    }
)
