"""qimclient: the Python client SDK for QIM (REST and the `/ws/v1` WebSocket protocol)."""

from .backoff import Backoff
from .calls import Call, CallTracker, UnknownCall, new_call_id
from .codec import Frame, decode_frame, encode_frame
from .connection import QimClient
from .cursor import CursorStore, JsonFileCursorStore, MemoryCursorStore
from .errors import ApiError, AuthError, ConnectionLost, QimClientError, QimError
from .handshake import CLOSE_AUTH_TIMEOUT, CLOSE_CREDENTIALS_REVOKED, CLOSE_UNAUTHENTICATED
from .messaging import new_client_msg_id
from .registry import Rendered, RegistrySync, TypeRegistry, render_message, version_satisfies
from .rest import RestClient, login
from .rooms import RoomItem, RoomState, RoomSync
from .sync import EventCallback, MailboxEvent, MailboxSync, is_live_event
from .urls import websocket_url
from .version import __version__


__all__ = [
    "CLOSE_AUTH_TIMEOUT",
    "CLOSE_CREDENTIALS_REVOKED",
    "CLOSE_UNAUTHENTICATED",
    "ApiError",
    "AuthError",
    "Backoff",
    "Call",
    "CallTracker",
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
    "RegistrySync",
    "Rendered",
    "RestClient",
    "RoomItem",
    "RoomState",
    "RoomSync",
    "TypeRegistry",
    "UnknownCall",
    "__version__",
    "decode_frame",
    "encode_frame",
    "is_live_event",
    "login",
    "new_call_id",
    "new_client_msg_id",
    "render_message",
    "version_satisfies",
    "websocket_url",
]
