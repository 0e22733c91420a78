"""ApnsSender: pushes to Apple over HTTP/2 with token authentication (an ES256 provider JWT).

Built on httpx (HTTP/2 by h2) and PyJWT rather than aioapns: aioapns fixes Apple's hosts, so
it cannot be pointed at a local stand-in (QIM_APNS_ENDPOINT) or trust an extra CA, and it is
asyncio while the push worker is synchronous. One HTTP/2 client per endpoint lives as long as
the process, so pushes share one multiplexed, kept-alive connection as Apple asks.

Apple's answers drive the outbox: 410 Unregistered and 400 BadDeviceToken or
DeviceTokenNotForTopic reject that token (the worker clears it and fails the task); 429 and
5xx are retried (after Retry-After when given); 403 ExpiredProviderToken renews the JWT and
retries once within the same send; any other 4xx fails the task with Apple's reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from urllib.parse import quote

import httpx
import jwt
from django.conf import settings

from qim.clock import now_ms as wall_clock_ms
from qim.models import Device, PushTask
from qim.push.senders import PushSendError, request_timeout_s
from push_providers.apns_request import ApnsRequest, build_request
from push_providers.retry_after import retry_after_s
from push_providers.credentials import ApnsCredentials

logger = logging.getLogger(__name__)

APPLE_ENDPOINTS = {"production": "https://api.push.apple.com", "sandbox": "https://api.sandbox.push.apple.com"}
# Apple refuses provider tokens older than an hour and throttles renewals more frequent
# than every 20 minutes: renew after 50.
TOKEN_RENEW_AFTER_S = 50 * 60
REJECTED_TOKEN_REASONS = frozenset({"Unregistered", "BadDeviceToken", "DeviceTokenNotForTopic"})
EXPIRED_TOKEN_REASON = "ExpiredProviderToken"


def endpoint_for(credentials: ApnsCredentials) -> str:
    """QIM_APNS_ENDPOINT when set, else Apple's host for the credential's environment."""
    if settings.QIM_APNS_ENDPOINT:
        return settings.QIM_APNS_ENDPOINT.rstrip("/")
    return APPLE_ENDPOINTS["sandbox" if credentials.environment == "sandbox" else "production"]


class ProviderTokens:
    """Provider JWTs, one per signing key, reused until TOKEN_RENEW_AFTER_S; `clock` gives
    Unix seconds (swap it in tests)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def get(self, credentials: ApnsCredentials, *, renew: bool = False) -> str:
        key = (credentials.team_id, credentials.key_id, hashlib.sha256(credentials.key_pem.encode()).hexdigest())
        now = self.clock()
        with self._lock:
            cached = self._tokens.get(key)
            if cached is not None and not renew and now - cached[1] < TOKEN_RENEW_AFTER_S:
                return cached[0]
            token = jwt.encode(
                {"iss": credentials.team_id, "iat": int(now)},
                credentials.key_pem,
                algorithm="ES256",
                headers={"kid": credentials.key_id},
            )
            self._tokens[key] = (token, now)
            return token


class ApnsSender:
    name = "apns"

    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms, tokens: ProviderTokens | None = None) -> None:
        self.clock_ms = clock_ms
        self.tokens = tokens or ProviderTokens()
        self._clients: dict[tuple[str, str, float], httpx.Client] = {}
        self._lock = threading.Lock()

    def send(self, task: PushTask, device: Device, credentials: ApnsCredentials) -> None:
        """Returns once Apple accepted the push; raises PushSendError (or an httpx error,
        transient) otherwise."""
        request = build_request(task, device, credentials, self.clock_ms())
        # Quoted: a token is whatever a client registered; it must not reach another path.
        url = f"{endpoint_for(credentials)}/3/device/{quote(request.token, safe='')}"
        deadline = time.monotonic() + request_timeout_s()
        response = self._post(url, request, self.tokens.get(credentials))
        if response.status_code == 403 and _reason(response) == EXPIRED_TOKEN_REASON:
            # The resend shares the one request's time budget: the send stays within half the lease.
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise PushSendError("APNs 403 ExpiredProviderToken (no time left to resend)")
            response = self._post(url, request, self.tokens.get(credentials, renew=True), timeout_s=left_s)
        _settle(response, request.token)
        logger.debug("APNs accepted task %s: apns-id %s", task.id, response.headers.get("apns-id", "-"))

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def _post(
        self, url: str, request: ApnsRequest, provider_token: str, timeout_s: float | None = None
    ) -> httpx.Response:
        headers = {**request.headers, "authorization": f"bearer {provider_token}", "content-type": "application/json"}
        client = self._client(url)
        timeout = client.timeout if timeout_s is None else httpx.Timeout(timeout_s)
        return client.post(url, content=request.body, headers=headers, timeout=timeout)

    def _client(self, url: str) -> httpx.Client:
        """The process's client for this endpoint (and CA file and timeout, which tests vary)."""
        origin = url.split("/3/device/", 1)[0]
        key = (origin, settings.QIM_PUSH_CA_FILE, request_timeout_s())
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                # TCP_NODELAY, as curl and nghttp2 set for HTTP/2: httpcore writes a request's
                # HEADERS and DATA frames apart, and Nagle may hold the second until the first
                # is acknowledged.
                transport = httpx.HTTPTransport(
                    http2=True, verify=_tls_context(), socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
                )
                client = httpx.Client(transport=transport, timeout=key[2])
                self._clients[key] = client
            return client


def _tls_context() -> ssl.SSLContext:
    """The system's CAs, plus QIM_PUSH_CA_FILE when set (a TLS proxy, the tests' stand-in)."""
    context = ssl.create_default_context()
    if settings.QIM_PUSH_CA_FILE:
        context.load_verify_locations(cafile=settings.QIM_PUSH_CA_FILE)
    return context


def _settle(response: httpx.Response, token: str) -> None:
    """Nothing for 200; otherwise the PushSendError that says what Apple's answer means."""
    status = response.status_code
    if status == 200:
        return
    reason = _reason(response)
    message = f"APNs {status} {reason}"
    if reason in REJECTED_TOKEN_REASONS and status in (400, 410):
        raise PushSendError(message, rejected_token=token)
    if status == 429 or status >= 500 or reason == EXPIRED_TOKEN_REASON:
        raise PushSendError(message, retry_after_s=retry_after_s(response.headers.get("retry-after"), time.time()))
    raise PushSendError(message, permanent=True)


def _reason(response: httpx.Response) -> str:
    try:
        reason = json.loads(response.content or b"{}").get("reason")
    except (ValueError, AttributeError):
        return "(no reason)"
    return reason if isinstance(reason, str) and reason.isascii() and len(reason) <= 64 else "(no reason)"

