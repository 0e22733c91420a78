"""What an APNs push carries: which token, the apns-* headers and the JSON body, per task kind.

Messages are alert pushes to the device's push_token. Calls go to the PushKit voip_token as
VoIP pushes (`<bundle>.voip`); a device that registered no voip_token gets the call as a
time-sensitive alert on its push_token instead, so an app without PushKit still shows it.
The device's tokens at send time decide, not the payload's `use_token` (what they were when
the call was queued). Either way a call push expires at the ring deadline, and a call whose
deadline passed is not sent at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from qim.models import Device, PushTask
from qim.push.senders import PushSendError
from push_providers.credentials import ApnsCredentials
from push_providers.payloads import fit_preview

ALERT_LIMIT_BYTES = 4096  # Apple's limit for every push but VoIP
VOIP_LIMIT_BYTES = 5120
COLLAPSE_ID_MAX_BYTES = 64
# How long APNs keeps a message alert for a device that is off: a day, then it is stale.
MESSAGE_TTL_S = 24 * 3600
CALL_ALERT_BODY = "Incoming call"


@dataclass(frozen=True)
class ApnsRequest:
    token: str  # the device token the URL names: /3/device/<token>
    headers: dict[str, str]  # apns-* headers, the provider JWT aside
    body: bytes  # the JSON payload


def build_request(task: PushTask, device: Device, credentials: ApnsCredentials, now_ms: int) -> ApnsRequest:
    """The request for one task, or a permanent PushSendError when it must not go out."""
    if task.kind == PushTask.VOIP:
        return _call_request(task.payload, device, credentials, now_ms)
    return _message_request(task.payload, device, credentials, now_ms)


def _message_request(payload: dict, device: Device, credentials: ApnsCredentials, now_ms: int) -> ApnsRequest:
    if not device.push_token:  # Apple refuses non-VoIP pushes to a PushKit token
        raise PushSendError("APNs: the device has only a VoIP token, no token for alerts", permanent=True)
    body = fit_preview(payload, _message_body, ALERT_LIMIT_BYTES)
    headers = {
        "apns-push-type": "alert",
        "apns-topic": credentials.bundle_id,
        "apns-priority": "10",
        "apns-expiration": str(now_ms // 1000 + MESSAGE_TTL_S),
        "apns-collapse-id": collapse_id("c", str(payload.get("conversation_id", ""))),
    }
    return ApnsRequest(device.push_token, headers, body)


def _message_body(payload: dict) -> bytes:
    conversation_id = payload.get("conversation_id")
    aps: dict = {
        "alert": {"title": str(payload.get("sender_id", "")), "body": str(payload.get("preview", ""))},
        "sound": "default",
        "thread-id": str(conversation_id),
    }
    if isinstance(payload.get("badge"), int):
        aps["badge"] = payload["badge"]
    ids = {key: payload[key] for key in ("conversation_id", "conversation_seq", "sender_id") if key in payload}
    return _encode({"aps": aps, "qim": {"type": "message", **ids}})


def _call_request(payload: dict, device: Device, credentials: ApnsCredentials, now_ms: int) -> ApnsRequest:
    deadline_ms = int(payload.get("ring_deadline_ms") or 0)
    if deadline_ms <= now_ms:
        raise PushSendError("ring deadline passed", permanent=True)
    call = {key: value for key, value in payload.items() if key != "use_token"}
    headers = {"apns-priority": "10", "apns-expiration": str(deadline_ms // 1000)}
    if device.voip_token:
        headers.update({"apns-push-type": "voip", "apns-topic": f"{credentials.bundle_id}.voip"})
        return ApnsRequest(device.voip_token, headers, _fit(_encode({"qim": call}), VOIP_LIMIT_BYTES))
    if not device.push_token:
        raise PushSendError("APNs: the device has no token for this call push", permanent=True)
    headers.update({
        "apns-push-type": "alert",
        "apns-topic": credentials.bundle_id,
        "apns-collapse-id": collapse_id("call", str(payload.get("call_id", ""))),
    })
    aps = {
        "alert": {"title": str(payload.get("caller_id", "")), "body": CALL_ALERT_BODY},
        "sound": "default",
        "interruption-level": "time-sensitive",
        "thread-id": str(payload.get("conversation_id", "")),
    }
    return ApnsRequest(device.push_token, headers, _fit(_encode({"aps": aps, "qim": call}), ALERT_LIMIT_BYTES))


def collapse_id(prefix: str, value: str) -> str:
    """`<prefix>:<value>`, or a digest of the value when that is over Apple's 64 bytes."""
    candidate = f"{prefix}:{value}"
    if len(candidate.encode()) <= COLLAPSE_ID_MAX_BYTES:
        return candidate
    return f"{prefix}:{hashlib.sha256(value.encode()).hexdigest()[:40]}"


def _fit(body: bytes, limit: int) -> bytes:
    if len(body) > limit:  # a call payload has only ids; nothing to shorten
        raise PushSendError(f"APNs: push payload is {len(body)} bytes, over {limit}", permanent=True)
    return body


def _encode(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
