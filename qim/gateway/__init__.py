"""The WebSocket gateway: consumer, dispatch table, ConnectionNode, presence directory."""
