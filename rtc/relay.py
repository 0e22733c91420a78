"""RTC_SIGNAL frames and their delivery to chosen devices of a user, on whichever nodes hold
them: online connections only, nothing stored (design §5)."""

from __future__ import annotations

from typing import Any

from qim.infra import codec
from qim.node.connection_node import get_node
from qim.node.user_push import UserPush
from rtc.calls import Call

# UserPush.kind of an RTC_SIGNAL: a node it reaches starts its call sweeps (rtc/frames.py).
RTC_PUSH = "rtc.signal"


def signal_text(
    call: Call, *, from_user_id: str, from_device_id: str | None, action: str, payload_json: str,
    extra: dict[str, Any] | None = None,
) -> str:
    """The RTC_SIGNAL push (protocol.md §9); the payload's JSON is spliced in as sent, never
    re-encoded. `from_device_id` is null for signals the server itself sends."""
    head = codec.encode(
        {
            "type": "RTC_SIGNAL",
            "conversation_id": call.conversation_id,
            "from_user_id": from_user_id,
            "from_device_id": from_device_id,
            "call_id": call.call_id,
            "action": action,
            **(extra or {}),
        }
    )
    return head[:-1] + ',"signal_payload":' + payload_json + "}"


async def deliver_to_devices(
    tenant_id: int, user_id: str, text: str, *, only: str | None = None, exclude: str | None = None
) -> int:
    """Push `text` to the user's online connections of device `only` (or of every device but
    `exclude`), a UserPush on the one node-to-node path; answers how many devices it was
    addressed to (0: none of them is online, and nothing is sent)."""
    node = get_node()
    online = (await node.directory.online_devices(tenant_id, [user_id])).get(user_id, set())
    targets = ({only} & online) if only is not None else online - {exclude}
    if not targets:
        return 0
    # Signals are best effort, like every push; the ring timeout ends a lost call.
    await node.send_to_users(UserPush(
        tenant_id=tenant_id, user_ids=[user_id], text=text, kind=RTC_PUSH,
        only_device=(user_id, only) if only is not None else None,
        exclude_device=(user_id, exclude) if exclude is not None else None,
    ))
    return len(targets)


def route_to_other_party(call: Call, from_user_id: str) -> tuple[str, str | None]:
    """Who hears a party's signal: (user, device or None for all). The caller takes part from
    the device that invited; the callee from every device until one accepts, then that one."""
    to_user = call.other(from_user_id)
    if to_user == call.caller_id:
        return to_user, call.caller_device_id
    return to_user, call.callee_device_id or None


async def notify_signal(
    call: Call, from_user_id: str, from_device_id: str, action: str, payload_json: str,
    extra: dict[str, Any] | None = None,
) -> int:
    """Relay a party's signal to the other party's devices in the call; answers the count."""
    to_user, device = route_to_other_party(call, from_user_id)
    text = signal_text(
        call, from_user_id=from_user_id, from_device_id=from_device_id, action=action,
        payload_json=payload_json, extra=extra,
    )
    return await deliver_to_devices(call.tenant_id, to_user, text, only=device)


async def notify_server_signal(
    call: Call, to_user_id: str, action: str, payload: dict[str, Any], *,
    only: str | None = None, exclude: str | None = None,
) -> int:
    """A signal the server sends (busy, timeout, cancel to the callee's other devices); it
    names the other party as `from_user_id` and has `from_device_id: null`."""
    text = signal_text(
        call, from_user_id=call.other(to_user_id), from_device_id=None, action=action,
        payload_json=codec.encode(payload),
    )
    return await deliver_to_devices(call.tenant_id, to_user_id, text, only=only, exclude=exclude)
