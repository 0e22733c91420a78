"""The RTC database writes (design §5, protocol.md §9): an ended call's one
qim.call_record.v1 message and CallRecord row, and VoIP PushTasks within each device's daily
quota. Each sync function runs in a database thread and opens its own transaction (it is the
edge: the call lifecycle, rtc/lifecycle.py, is async and may not hold one)."""

from __future__ import annotations

from datetime import UTC, date, datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from qim.actions.log import append_to_log, lock_conversation
from qim.clock import now_ms
from qim.conf import limit
from qim.content_types import CALL_RECORD, builtin_policy, rendering_policy
from qim.infra import codec
from qim.models import Device, PushTask, User
from qim.queries.conversations import current_members
from qim.queries.online import NOT_ASKED, online_before_lock
from rtc.calls import Call
from rtc.models import CallRecord, VoipPushQuota


def call_record_payload(call: Call) -> dict:
    """The §9 fields of a call record."""
    return {
        "call_id": call.call_id, "caller_id": call.caller_id, "callee_id": call.callee_id,
        "outcome": call.outcome, "duration_s": call.duration_s,
    }


def do_record_call(call: Call) -> int | None:
    """Write an ended call's qim.call_record.v1 message (sender: the caller; recipients: the
    current members; counts_unread: the tenant's registry row) and its CallRecord row, in one
    transaction under the conversation's lock. Answers the message's conversation_seq, or None
    when the call was already recorded: the unique (tenant, call_id) decides between racers.
    """
    recorded = CallRecord.objects.filter(tenant_id=call.tenant_id, call_id=call.call_id)
    if recorded.exists():
        return None
    policy = rendering_policy(call.tenant_id, CALL_RECORD) or builtin_policy(CALL_RECORD)
    # Asked before the lock, never under it (qim.queries.online).
    online = online_before_lock(call.tenant_id, call.conversation_id) if policy.counts_unread else NOT_ASKED
    try:
        with transaction.atomic():
            conversation = lock_conversation(call.conversation_id)
            if recorded.exists():
                return None
            caller = User.objects.get(tenant_id=call.tenant_id, username=call.caller_id)
            appended = append_to_log(
                conversation, sender=caller, sender_device_id=call.caller_device_id, policy=policy,
                payload_json=codec.encode(call_record_payload(call)),
                recipients=current_members(conversation.pk), now_ms=now_ms(), online=online,
            )
            CallRecord.objects.create(
                tenant_id=call.tenant_id, call_id=call.call_id, conversation=conversation,
                message=appended.record, caller_id=call.caller_id, callee_id=call.callee_id,
                outcome=call.outcome, duration_s=call.duration_s, started_at_ms=call.created_at_ms,
                ended_at_ms=call.ended_at_ms,
            )
    except IntegrityError:
        if recorded.exists():
            return None
        raise
    return appended.record.conversation_seq


def utc_day(at_ms: int) -> date:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).date()


def take_voip_quota(device_pk: int, day: date, quota: int) -> bool:
    """One VoIP push of the device's daily quota, or False when it is spent: one conditional
    UPDATE, atomic on every database, so racing nodes never overshoot."""
    VoipPushQuota.objects.bulk_create([VoipPushQuota(device_id=device_pk, day=day)], ignore_conflicts=True)
    taken = VoipPushQuota.objects.filter(device_id=device_pk, day=day, count__lt=quota).update(count=F("count") + 1)
    return taken == 1


def voip_push_payload(call: Call, device: Device) -> dict:
    """What the push carries: enough to show the call, and the absolute deadline after which
    the device must not ring (a push delivered late never rings a dead call)."""
    return {
        "type": "rtc.invite",
        "call_id": call.call_id,
        "conversation_id": call.conversation_id,
        "caller_id": call.caller_id,
        "ring_deadline_ms": call.ring_deadline_ms,
        # iOS sends through PushKit with the VoIP token; others high priority with push_token.
        "use_token": "voip_token" if device.voip_token else "push_token",
    }


def do_queue_voip_pushes(call: Call, now: int) -> int:
    """A PushTask of kind voip per callee device with push credentials, within each device's
    rtc_voip_push_daily_quota (UTC days). Never touches UserBadgeState. One transaction of its
    own; answers how many tasks were queued."""
    quota = int(limit("rtc_voip_push_daily_quota"))
    day = utc_day(now)
    queued = 0
    with transaction.atomic():
        devices = Device.objects.filter(
            user__tenant_id=call.tenant_id, user__username=call.callee_id
        ).exclude(push_token="", voip_token="")
        for device in devices.order_by("pk"):
            if not take_voip_quota(device.pk, day, quota):
                continue
            PushTask.objects.create(
                tenant_id=call.tenant_id, user_id=device.user_id, device=device, kind=PushTask.VOIP,
                payload=voip_push_payload(call, device), available_at_ms=now, created_at_ms=now,
            )
            queued += 1
    return queued
