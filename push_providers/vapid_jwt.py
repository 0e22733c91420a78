"""VAPID (RFC 8292) Authorization headers, signed once per (key, push service) and reused.

Signing costs an ECDSA signature per push otherwise; a push service sees the same JWT for
hours, as browsers' servers commonly do. RFC 8292 §2 caps `exp` at 24 hours; we sign for 12
and sign anew an hour before it runs out, so a JWT never expires in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from py_vapid import Vapid02

from push_providers.credentials import VapidCredentials

JWT_LIFETIME_S = 12 * 3600
RENEW_BEFORE_S = 3600


def audience_of(endpoint: str) -> str:
    """The JWT's `aud`: the origin of the push resource (RFC 8292 §2)."""
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


class VapidJwtCache:
    """Authorization headers by (private key, subject, audience); `clock` is wall seconds."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._headers: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def authorization(self, credentials: VapidCredentials, audience: str) -> str:
        """`vapid t=<jwt>,k=<public key>` for a push to `audience`; a new JWT when the cached
        one is within RENEW_BEFORE_S of its exp."""
        key = (credentials.private_key_pem, credentials.subject, audience)
        now = self.clock()
        with self._lock:
            cached = self._headers.get(key)
        if cached is not None and cached[1] - now > RENEW_BEFORE_S:
            return cached[0]
        expires = int(now) + JWT_LIFETIME_S
        signer = Vapid02.from_pem(credentials.private_key_pem.encode())
        header = signer.sign({"aud": audience, "sub": credentials.subject, "exp": expires})["Authorization"]
        with self._lock:
            self._headers[key] = (header, expires)
        return header

    def forget(self, credentials: VapidCredentials, audience: str) -> None:
        """Drop the cached JWT (the push service said it expired): the next push signs anew."""
        with self._lock:
            self._headers.pop((credentials.private_key_pem, credentials.subject, audience), None)
