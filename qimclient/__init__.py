"""qimclient: the Python client SDK for QIM (REST and the `/ws/v1` WebSocket protocol)."""

from .backoff import Backoff
from .codec import Frame, decode_frame, encode_frame
from .connection import CLOSE_AUTH_TIMEOUT, CLOSE_UNAUTHENTICATED, QimClient
from .cursor import CursorStore, JsonFileCursorStore, MemoryCursorStore
from .errors import ApiError, AuthError, ConnectionLost, QimClientError, QimError
from .messaging import new_client_msg_id
from .rest import RestClient, login
from .sync import EventCallback, MailboxEvent, MailboxSync
from .urls import websocket_url

__version__ = "1.1.0"

__all__ = [
    "CLOSE_AUTH_TIMEOUT",
    "CLOSE_UNAUTHENTICATED",
    "ApiError",
    "AuthError",
    "Backoff",
    "ConnectionLost",
    "CursorStore",
    "EventCallback",
    "Frame",
    "JsonFileCursorStore",
    "MailboxEvent",
    "MailboxSync",
    "MemoryCursorStore",
    "QimClient",
    "QimClientError",
    "QimError",
    "RestClient",
    "decode_frame",
    "encode_frame",
    "login",
    "new_client_msg_id",
    "websocket_url",
]
