"""RTC_SIGNAL (protocol.md §12), and each node's side of a relayed signal."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from qim.conf import limit
from qim.errors import Refused
from qim.infra import codec
from qim.node.connection import Connection
from qim.gateway.dispatch import frame_handler
from qim.node.connection_node import ConnectionNode, on_disconnect, on_push_delivered
from qim.infra.ratelimit import check_rate
from rtc.lifecycle import INVITE, Signal, check_rtc_signal, departures, ensure_sweeping
from rtc.relay import RTC_PUSH

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Action = Literal["invite", "ringing", "accept", "reject", "cancel", "hangup", "sdp", "candidate"]


class RtcSignal(msgspec.Struct):
    conversation_id: Id
    target_user_id: Id
    call_id: Id
    action: Action
    # Opaque to the server (SDP, ICE candidates, media hints); {} when left out.
    signal_payload: Any = msgspec.field(default_factory=dict)
    req_id: str | None = None
    type: str = "RTC_SIGNAL"


def check_signal_payload(payload: Any) -> str:
    """The payload's compact JSON, at most QIM_MAX_CUSTOM_PAYLOAD_BYTES of UTF-8."""
    payload_json = codec.encode(payload)
    size, allowed = len(payload_json.encode()), int(limit("max_custom_payload_bytes"))
    if size > allowed:
        raise Refused("too_large", f"signal_payload is {size} bytes; at most {allowed}")
    return payload_json


@frame_handler("RTC_SIGNAL", RtcSignal)
async def handle_rtc_signal(conn: Connection, frame: RtcSignal) -> dict:
    """One call action -> ACK {call_id, state, delivered_connections, pushed}; invites count
    against per_user_msg_rate."""
    payload_json = check_signal_payload(frame.signal_payload)
    if frame.target_user_id == conn.user_id:
        raise Refused("bad_frame", "target_user_id is yourself")
    if frame.action == INVITE:
        await check_rate("per_user_msg_rate", limit("per_user_msg_rate"), str(conn.tenant_id), conn.user_id)
    ensure_sweeping()
    signal = Signal(frame.conversation_id, frame.target_user_id, frame.call_id, frame.action, payload_json)
    ack = await check_rtc_signal(conn, signal)
    return ack.frame()


@on_push_delivered(RTC_PUSH)
async def sweep_where_signals_go(node: ConnectionNode) -> None:
    """A node that serves a party watches for ring timeouts and orphaned calls too
    (rtc/ring_timer.py, rtc/departures.py OrphanedCalls), even when its party never answers."""
    ensure_sweeping()


@on_disconnect
async def end_calls_of_departed_device(conn: Connection) -> None:
    """A call's device that is gone past rtc_disconnect_grace_s ends its call (rtc/departures.py)."""
    await departures.connection_closed(conn)
