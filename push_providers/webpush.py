"""WebPushSender: RFC 8030 delivery with RFC 8291 aes128gcm payloads and RFC 8292 VAPID.

pywebpush encrypts (on http_ece) and posts through one requests Session per worker process;
VAPID JWTs come from VapidJwtCache (py-vapid signs). What the push service answers decides
what the outbox does:

- 200/201/202: sent.
- 404/410: the subscription is gone (the browser unsubscribed or it expired): the device
  forgets it (`rejected_token`) and the task fails.
- 429 and 5xx: transient, retried with backoff and not before the Retry-After.
- 401/403 saying the JWT expired: the JWT is signed anew and the push sent once more, within
  the same send and the same request time budget; not a failure.
- 400, 401, 403, 413 and any other answer: permanent. The same bytes with the same key get
  the same answer (a malformed request, a VAPID key that is not the one the browser
  subscribed with, a body too large), so a retry only delays the failure; the subscription
  is kept, since an operator who fixes the key makes it work again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import requests
from pywebpush import WebPusher

from qim.models import Device, PushTask
from qim.push.senders import PushSendError, request_timeout_s
from qim.push.web_subscription import parse_subscription
from push_providers.credentials import VapidCredentials
from push_providers.http_session import provider_session
from push_providers.payloads import fit_preview
from push_providers.retry_after import retry_after_s
from push_providers.vapid_jwt import VapidJwtCache, audience_of

# Push services take at most 4096 bytes of encrypted body (RFC 8030 §7.2); one aes128gcm
# record adds 86 bytes of header (salt, record size, sender key), a 16-byte tag and a
# 1-byte padding delimiter (RFC 8188, RFC 8291 §4), so the JSON gets the rest.
MAX_BODY_BYTES = 4096
AES128GCM_OVERHEAD = 86 + 16 + 1
MAX_PLAINTEXT_BYTES = MAX_BODY_BYTES - AES128GCM_OVERHEAD
# How long a push service keeps a message push for a browser that is away: a day, after
# which the conversation's unread count is what the app shows anyway.
MESSAGE_TTL_S = 24 * 3600
MESSAGE_FIELDS = ("conversation_id", "conversation_seq", "sender_id", "preview", "badge")
CALL_FIELDS = ("call_id", "conversation_id", "caller_id", "ring_deadline_ms")
SENT_STATUSES = {200, 201, 202}
GONE_STATUSES = {404, 410}
TOPIC_CHARS = 32  # RFC 8030 §5.4: at most 32 base64url characters


class WebPushSender:
    name = "web"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # wall seconds: ring deadlines and Retry-After dates are wall time
        self.session = provider_session()
        self.jwts = VapidJwtCache(clock)

    def send(self, task: PushTask, device: Device, credentials: VapidCredentials) -> None:
        """One push to the device's subscription; PushSendError says what the answer means."""
        subscription = parse_subscription(device.push_token)
        payload, ttl_s, urgency = self._message(task)
        body = fit_preview(payload, _encode, MAX_PLAINTEXT_BYTES)
        headers = {"Urgency": urgency}
        if task.kind != PushTask.VOIP and "conversation_id" in payload:
            headers["Topic"] = conversation_topic(credentials, payload["conversation_id"])
        audience = audience_of(subscription["endpoint"])
        deadline = time.monotonic() + request_timeout_s()
        response = self._post(subscription, body, ttl_s, headers, credentials, audience, deadline)
        if _says_jwt_expired(response):
            self.jwts.forget(credentials, audience)
            response = self._post(subscription, body, ttl_s, headers, credentials, audience, deadline)
        self._settle(response, device.push_token)

    def _message(self, task: PushTask) -> tuple[dict, int, str]:
        """(the JSON the service worker gets, TTL seconds, Urgency) for one task."""
        if task.kind == PushTask.VOIP:
            left_ms = int(task.payload["ring_deadline_ms"]) - int(self.clock() * 1000)
            if left_ms <= 0:
                raise PushSendError("ring deadline passed", permanent=True)
            fields = {k: task.payload[k] for k in CALL_FIELDS if k in task.payload}
            return {"type": "rtc.invite", **fields}, math.ceil(left_ms / 1000), "high"
        fields = {k: task.payload[k] for k in MESSAGE_FIELDS if k in task.payload}
        return {"type": "message", **fields}, MESSAGE_TTL_S, "normal"

    def _post(
        self, subscription: dict, body: bytes, ttl_s: int, headers: dict[str, str],
        credentials: VapidCredentials, audience: str, deadline: float,
    ) -> requests.Response:
        left_s = deadline - time.monotonic()
        host = urlsplit(subscription["endpoint"]).hostname
        if left_s <= 0:
            raise PushSendError(f"web push: no time left for a request to {host}")
        authorization = self.jwts.authorization(credentials, audience)
        pusher = WebPusher(subscription, requests_session=self.session)
        try:
            return pusher.send(
                data=body, headers={**headers, "Authorization": authorization}, ttl=ttl_s,
                content_encoding="aes128gcm", timeout=left_s,
            )
        except requests.RequestException as exc:
            # Not str(exc): it quotes the endpoint's URL, a capability to push to the browser.
            raise PushSendError(f"web push: {type(exc).__name__} talking to {host}") from None

    def _settle(self, response: requests.Response, stored_subscription: str) -> None:
        status = response.status_code
        if status in SENT_STATUSES:
            return
        what = f"web push: {status} {response.reason or ''} {_short(response.text)}".rstrip()
        if status in GONE_STATUSES:
            raise PushSendError(f"{what} (subscription gone)", rejected_token=stored_subscription)
        if status == 429 or status >= 500:
            raise PushSendError(what, retry_after_s=retry_after_s(response.headers.get("Retry-After"), self.clock()))
        raise PushSendError(what, permanent=True)


def conversation_topic(credentials: VapidCredentials, conversation_id: object) -> str:
    """The Topic that makes a push service keep only the latest undelivered push of one
    conversation: an HMAC of its id under the VAPID key, so the service learns no ids."""
    digest = hmac.new(credentials.private_key_pem.encode(), str(conversation_id).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()[:TOPIC_CHARS]


def _encode(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _says_jwt_expired(response: requests.Response) -> bool:
    return response.status_code in (401, 403) and "expired" in response.text.lower()


def _short(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]
