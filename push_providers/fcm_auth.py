"""OAuth2 access tokens for FCM HTTP v1, from a service account, cached until near expiry.

google-auth signs the RS256 assertion and talks to the account's `token_uri` (Google's, or a
local stand-in in tests); we only keep one Credentials object per service account, so one
worker asks for a token about once an hour per tenant, and forget it when FCM answers 401.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import threading

import requests
from django.conf import settings
from google.auth import exceptions as auth_errors
from google.auth.transport.requests import Request
from google.oauth2 import service_account
from requests.adapters import HTTPAdapter

from qim.push.senders import PushSendError

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


def provider_ssl_context() -> ssl.SSLContext:
    """The system's trusted CAs, plus QIM_PUSH_CA_FILE when set (a corporate proxy's CA, or
    the tests' stand-in certificate)."""
    context = ssl.create_default_context()
    if settings.QIM_PUSH_CA_FILE:
        context.load_verify_locations(cafile=settings.QIM_PUSH_CA_FILE)
    return context


class _ContextAdapter(HTTPAdapter):
    """A requests adapter that verifies TLS with our context (requests' `verify=path` would
    replace the system's CAs instead of adding to them)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)


class _TimedRequest(Request):
    """google-auth's requests transport with the send's time left as its timeout (google-auth
    would wait 120 s, past the claim lease)."""

    timeout_s: float = 10.0

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):  # type: ignore[no-untyped-def]
        return super().__call__(url, method=method, body=body, headers=headers, timeout=self.timeout_s, **kwargs)


class AccessTokens:
    """Access tokens per service account; thread-safe, one refresh at a time."""

    def __init__(self) -> None:
        self._session = requests.Session()
        self._session.mount("https://", _ContextAdapter(provider_ssl_context()))
        self._request = _TimedRequest(self._session)
        self._by_account: dict[str, service_account.Credentials] = {}
        self._lock = threading.Lock()

    def token(self, info: dict, timeout_s: float) -> str:
        """A valid access token for the service account `info` (google-auth refreshes a few
        minutes before expiry), fetching within `timeout_s`; a transient PushSendError when
        the token endpoint fails."""
        key = _account_key(info)
        with self._lock:
            credentials = self._by_account.get(key)
            if credentials is None:
                credentials = _credentials(info)
                self._by_account[key] = credentials
            if not credentials.valid:
                self._request.timeout_s = timeout_s
                _refresh(credentials, self._request)
            return credentials.token

    def forget(self, info: dict, token: str) -> None:
        """Drop `token` (FCM said it is expired or revoked): the next token() fetches anew.
        A token another thread already replaced is left alone."""
        key = _account_key(info)
        with self._lock:
            credentials = self._by_account.get(key)
            if credentials is not None and credentials.token == token:
                del self._by_account[key]


    def close(self) -> None:
        self._session.close()


def _account_key(info: dict) -> str:
    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()


def _credentials(info: dict) -> service_account.Credentials:
    try:
        return service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
    except (ValueError, KeyError) as exc:  # a malformed account: no retry can help
        raise PushSendError(f"FCM service account is unusable: {type(exc).__name__}", permanent=True) from None


def _refresh(credentials: service_account.Credentials, request: Request) -> None:
    try:
        credentials.refresh(request)
    except auth_errors.RefreshError as exc:
        # invalid_grant (a deleted key, a clock off by hours) is the operator's to fix; the
        # outbox retries with backoff so pushes go out once the account is fixed.
        raise PushSendError(f"FCM OAuth2 token refused: {_short(exc)}") from None
    except auth_errors.TransportError as exc:
        raise PushSendError(f"FCM OAuth2 token endpoint unreachable: {_short(exc)}") from None


def _short(exc: Exception) -> str:
    """google-auth's own sentence (its first argument; the rest is the raw answer)."""
    return str(exc.args[0] if exc.args else exc)[:200]
