"""qimclient: the Python client SDK for QIM (REST and the `/ws/v1` WebSocket protocol)."""

from .backoff import Backoff
from .codec import Frame, decode_frame, encode_frame
from .connection import CLOSE_AUTH_TIMEOUT, CLOSE_UNAUTHENTICATED, QimClient
from .errors import ApiError, AuthError, ConnectionLost, QimClientError, QimError
from .rest import RestClient, login
from .urls import websocket_url

__version__ = "1.0.0"

__all__ = [
    "CLOSE_AUTH_TIMEOUT",
    "CLOSE_UNAUTHENTICATED",
    "ApiError",
    "AuthError",
    "Backoff",
    "ConnectionLost",
    "Frame",
    "QimClient",
    "QimClientError",
    "QimError",
    "RestClient",
    "decode_frame",
    "encode_frame",
    "login",
    "websocket_url",
]
