"""EDIT by the sender within edit_self_window_s: the qim.edit.v1 event (carrying the new
payload) is committed first, then the target row takes it (design §2, the recall's order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Q

from qim.actions.anchors import do_log_anchored_event, stored_event_push, with_pushes_rendered_again
from qim.actions.log import lock_conversation
from qim.actions.mentions import apply_mentions, readdress, same_addresses
from qim.clock import now_ms
from qim.conf import limit
from qim.content_types import EDIT, TEXT, rendering_policy
from qim.errors import Refused
from qim.infra.faults import fault_point
from qim.infra import codec
from qim.models import MessageRecord, User
from qim.notify import UserPush, push_on_commit
from qim.queries.control import access_timeline_message, latest_edit_event_of, recall_event_of
from qim.queries.conversations import access_member_intervals
from qim.queries.online import NOT_ASKED, OnlineDevices, online_devices_of
from qim.windows import edit_deadline_ms


def check_edit_payload(tenant_id: int, content_type: str, payload: Any) -> str:
    """The new payload's compact JSON, measured like SEND's: UTF-8 bytes against the type's
    max_payload_bytes (never above max_custom_payload_bytes); a text stays {"text": "..."}."""
    if payload is None:
        raise Refused("bad_frame", "EDIT needs a payload")
    ceiling = int(limit("max_custom_payload_bytes"))
    policy = rendering_policy(tenant_id, content_type)
    max_bytes = min(ceiling, policy.max_payload_bytes) if policy is not None and policy.max_payload_bytes else ceiling
    payload_json = codec.encode(payload)
    size = len(payload_json.encode())
    if size > max_bytes:
        raise Refused("too_large", f"payload is {size} bytes; {content_type} allows {max_bytes}")
    if content_type == TEXT and not (isinstance(payload, dict) and isinstance(payload.get("text"), str)):
        raise Refused("bad_frame", 'a text payload is {"text": "..."}')
    return payload_json


def check_edit_message(
    user: User, device_id: str, conversation_id: str, conversation_seq: int, payload: Any,
    *, mentions: Sequence[str] | None = None, mention_all: bool | None = None,
) -> int:
    """The sender replaces their message's payload; answers the seq of its qim.edit.v1 event.

    The caller has checked the tenant and holds no transaction: this commits twice, in the
    design's order. Refuses `forbidden` (never a member, or not the sender), `not_found`,
    `conflict` (recalled, or its recall is already logged), `too_large` and `bad_frame` (the
    payload), `window_expired`, writing nothing. An EDIT whose payload is the newest logged
    edit's (a retry whose ACK was lost: EDIT has no idempotency key) answers that edit's seq
    and writes no second event; it applies that edit if it is still pending.

    `mentions` and `mention_all`, when given, replace the message's (issue #34): checked like
    SEND's, carried by the edit event, applied with its payload; the newly mentioned get an
    entry of the event and a mention push, and every mention_count follows the new set.
    """
    online = online_devices_of(user.tenant_id, list(mentions or ())) if mentions else NOT_ASKED
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        access_member_intervals(conversation, user.pk)
        target = access_timeline_message(conversation, conversation_seq)
        if target.sender_id != user.pk:
            raise Refused("forbidden", "only its sender edits a message")
        if target.state in (MessageRecord.RECALLED, MessageRecord.DELETED) or recall_event_of(
            conversation.pk, conversation_seq
        ):
            raise Refused("conflict", "a recalled message cannot be edited")
        payload_json = check_edit_payload(conversation.tenant_id, target.content_type, payload)
        readdressed = readdress(conversation, target, user, mentions, mention_all)
        latest = latest_edit_event_of(conversation.pk, conversation_seq)
        if latest is not None and latest.payload == payload_json and same_addresses(latest, readdressed):
            retried = latest
        else:
            retried = None
            now = now_ms()
            if now >= edit_deadline_ms(target):
                raise Refused("window_expired", "the edit window of this message has closed")
            appended = do_log_anchored_event(
                conversation, target, content_type=EDIT, actor=user, device_id=device_id,
                payload_json=payload_json, now_ms=now, also=readdressed.added if readdressed else None,
            )
            if readdressed is not None:
                readdressed.carry_on(appended.record)
                appended = with_pushes_rendered_again(conversation, appended)
    if retried is not None:
        with transaction.atomic():
            do_apply_edit(retried)  # a no-op unless the first EDIT died between its two commits
        return retried.conversation_seq
    # Design §2, log first (as for recall): the edit event is committed with the new payload,
    # so if we die right here (fault point edit.after_log) recovery finds an edit event newer
    # than the target's edit_event_conversation_seq and applies it. The reverse order would
    # leave the other members' devices never told of an edit they can see in history.
    fault_point("edit.after_log")
    with transaction.atomic():
        do_apply_edit(appended.record, push=appended.push, online=online)
        if appended.live_push is not None:
            push_on_commit(appended.live_push)
    return appended.record.conversation_seq


def do_apply_edit(event: MessageRecord, *, push: UserPush | None = None, online: OnlineDevices | None = None) -> bool:
    """Give the target the event's payload, state edited, edited_at_ms; only while it is not
    recalled and holds an older edit (two edits racing: the later seq wins). Joins the
    caller's transaction. Sends `push` (a new event's) after commit, or else re-issues the
    stored event's push when this call applied the edit (recovery). An event that carries
    mentions rewrites the target's (qim.actions.mentions; `online` lets it push the newly
    mentioned)."""
    changed = (
        MessageRecord.objects.filter(
            conversation_id=event.conversation_id,
            conversation_seq=event.target_conversation_seq,
            recall_event_conversation_seq__isnull=True,
            state__in=[MessageRecord.NORMAL, MessageRecord.EDITED],
        )
        .filter(Q(edit_event_conversation_seq__isnull=True) | Q(edit_event_conversation_seq__lt=event.conversation_seq))
        .update(
            payload=event.payload,
            state=MessageRecord.EDITED,
            edited_at_ms=event.sent_at_ms,
            edit_event_conversation_seq=event.conversation_seq,
        )
    )
    if changed:
        apply_mentions(event, online=online)
    if push is not None:
        push_on_commit(push)
    elif changed:
        push_on_commit(stored_event_push(event))
    return bool(changed)
