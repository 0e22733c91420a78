"""FcmSender: offline pushes to Android devices over FCM HTTP v1 (`messages:send`).

Why google-auth + httpx and not firebase-admin (checked on 7.7.0): it hard-codes Google's
host (`_MessagingService.FCM_URL`, no emulator switch), so QIM_FCM_ENDPOINT and the tests'
stand-in would mean patching its internals; it keeps apps in a process-global registry,
awkward with one service account per tenant; its client retries 500/503 four times by itself
with a 120 s default timeout, under the outbox's own retries and past the claim lease; and it
requires google-cloud-firestore, google-cloud-storage and google-api-core[grpc], which we do
not use. The part worth a library, the service account's signed OAuth2 assertion and token
refresh, is google-auth (what firebase-admin itself uses); the send is one JSON POST.

How FCM's answers drive the outbox (Google's FCM v1 ErrorCode reference):
  200                                  sent
  404 errorCode UNREGISTERED           the token is gone: cleared from the device, task failed
  400 INVALID_ARGUMENT on the token    likewise (a token FCM calls malformed never works)
  401 UNAUTHENTICATED                  our access token expired or was revoked: fetch a new
                                       one and send again, once, within the same send
  429 QUOTA_EXCEEDED, 500, 503         retried by the outbox, not before Retry-After
  any other 4xx                        permanent (SENDER_ID_MISMATCH, THIRD_PARTY_AUTH_ERROR,
                                       a message FCM refuses): task failed, token kept
"""

from __future__ import annotations

import json
import threading
import time

import httpx
from django.conf import settings

from qim.clock import now_ms
from qim.models import Device, PushTask
from qim.push.senders import PushSendError, request_timeout_s
from push_providers.retry_after import retry_after_s
from push_providers.credentials import FcmCredentials
from push_providers.fcm_auth import AccessTokens, provider_ssl_context
from push_providers.payloads import fit_preview

FCM_LIMIT_BYTES = 4096  # FCM's limit for a message to a token, keys and values included
MESSAGE_TTL_S = 24 * 3600  # a message push older than a day is noise; the app syncs anyway
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"


class FcmSender:
    name = "fcm"

    def __init__(self) -> None:
        self.tokens = AccessTokens()
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def send(self, task: PushTask, device: Device, credentials: FcmCredentials) -> None:
        """POST the task's message to FCM; raises PushSendError as the module docstring says."""
        token = device.push_token
        if not token:
            raise PushSendError("the device has no FCM registration token", permanent=True)
        body = encode_message(task, token)
        url = f"{settings.QIM_FCM_ENDPOINT.rstrip('/')}/v1/projects/{credentials.project_id}/messages:send"
        # One budget for the whole send (token fetch, send, renewal, send again), so that it
        # ends within the half lease it started in, however many requests it takes.
        deadline = time.monotonic() + request_timeout_s()
        access = self.tokens.token(credentials.service_account, time_left_s(deadline))
        response = self._post(url, body, access, deadline)
        if response.status_code == 401:  # expired or revoked: renewing is not a failure
            self.tokens.forget(credentials.service_account, access)
            access = self.tokens.token(credentials.service_account, time_left_s(deadline))
            response = self._post(url, body, access, deadline)
        check_answer(response, token)

    def _post(self, url: str, body: bytes, access_token: str, deadline: float) -> httpx.Response:
        headers = {"Authorization": f"Bearer {access_token}", "Content-Type": "application/json; charset=UTF-8"}
        try:
            return self.client().post(url, content=body, headers=headers, timeout=time_left_s(deadline))
        except httpx.HTTPError as exc:
            raise PushSendError(f"FCM unreachable: {type(exc).__name__}") from None

    def close(self) -> None:
        """Close the keep-alive connections (FCM's and the token endpoint's)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None
        self.tokens.close()

    def client(self) -> httpx.Client:
        """One keep-alive HTTP/2 client per process (FCM multiplexes sends on it)."""
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(http2=True, verify=provider_ssl_context(), timeout=request_timeout_s())
            return self._client


def time_left_s(deadline: float) -> float:
    """Seconds left of a send's budget; a transient PushSendError once it is spent."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise PushSendError("FCM send ran out of time (QIM_PUSH_REQUEST_TIMEOUT_S)")
    return left


def encode_message(task: PushTask, token: str) -> bytes:
    """The v1 request body, at most FCM_LIMIT_BYTES (a long preview is shortened; the limit
    is FCM's for data + notification, applied to the whole request to stay clear of it)."""
    try:
        if task.kind == PushTask.VOIP:
            return _encode(call_message(task.payload, token, now_ms()))
        return fit_preview(task.payload, lambda payload: _encode(chat_message(payload, token)), FCM_LIMIT_BYTES)
    except (KeyError, TypeError, ValueError) as exc:  # a payload no retry can mend
        raise PushSendError(f"push payload of kind {task.kind!r} lacks {exc}", permanent=True) from None


def chat_message(payload: dict, token: str) -> dict:
    """A notification the system shows even when the app is not running, plus the data the
    app needs to open the conversation; one notification per conversation (collapse key and
    tag), the newest replacing the older ones."""
    collapse = f"c:{payload['conversation_id']}"
    data = {
        "type": "message",
        "conversation_id": payload["conversation_id"],
        "conversation_seq": payload["conversation_seq"],
        "sender_id": payload["sender_id"],
        "badge": payload.get("badge", 0),
    }
    return {
        "message": {
            "token": token,
            "notification": {"title": str(payload["sender_id"]), "body": payload.get("preview", "")},
            "data": _strings(data),
            "android": {
                "priority": "normal",
                "collapse_key": collapse,
                "ttl": f"{MESSAGE_TTL_S}s",
                "notification": {"tag": collapse},
            },
        }
    }


def call_message(payload: dict, token: str, at_ms: int) -> dict:
    """A high-priority data-only message (the app rings itself), living only until the ring
    deadline so a late one is dropped by FCM; one already past its deadline is not sent."""
    left_s = (int(payload["ring_deadline_ms"]) - at_ms) // 1000
    if left_s < 1:
        raise PushSendError("ring deadline passed", permanent=True)
    data = {key: payload[key] for key in ("type", "call_id", "conversation_id", "caller_id", "ring_deadline_ms")}
    return {
        "message": {
            "token": token,
            "data": _strings(data),
            "android": {"priority": "high", "ttl": f"{left_s}s"},
        }
    }


def check_answer(response: httpx.Response, token: str) -> None:
    """Nothing for a 200; else the PushSendError FCM's answer means."""
    status = response.status_code
    if status == 200:
        return
    error = _error_of(response)
    what = f"FCM {status} {error.get('status', '')} {fcm_error_code(error)}".rstrip()
    what = f"{what}: {str(error.get('message', ''))[:200]}"
    if fcm_error_code(error) == "UNREGISTERED" or (status == 400 and names_the_token(error)):
        raise PushSendError(what, rejected_token=token)
    if status == 429 or status >= 500:
        raise PushSendError(what, retry_after_s=retry_after_s(response.headers.get("Retry-After"), time.time()))
    if status == 401:  # a fresh token refused too: the account may be fixed later; retry
        raise PushSendError(what)
    raise PushSendError(what, permanent=True)


def fcm_error_code(error: dict) -> str:
    """The FcmError errorCode in the error's details ("" when none)."""
    for detail in error.get("details") or []:
        if isinstance(detail, dict) and detail.get("@type") == FCM_ERROR_TYPE:
            return str(detail.get("errorCode", ""))
    return ""


def names_the_token(error: dict) -> bool:
    """INVALID_ARGUMENT about the registration token, not about our message: a field
    violation on message.token, or FCM's "not a valid FCM registration token"."""
    for detail in error.get("details") or []:
        if isinstance(detail, dict) and detail.get("@type") == BAD_REQUEST_TYPE:
            if any(v.get("field") == "message.token" for v in detail.get("fieldViolations") or [] if isinstance(v, dict)):
                return True
    return fcm_error_code(error) == "INVALID_ARGUMENT" and "registration token" in str(error.get("message", "")).lower()



def _error_of(response: httpx.Response) -> dict:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}


def _strings(data: dict) -> dict[str, str]:
    """FCM data values must be strings."""
    return {key: str(value) for key, value in data.items()}


def _encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
