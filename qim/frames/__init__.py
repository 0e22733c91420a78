"""The core app's WebSocket frame handlers, registered in the gateway's dispatch table."""

from qim.frames import control, messaging, presence  # noqa: F401  (importing registers the handlers)
