"""Wire shapes of persisted things: message objects, mailbox events, previews (protocol.md §5)."""

from __future__ import annotations

from typing import Any

from qim.clock import now_ms
from qim.content_types import GENERIC_PLACEHOLDER, TEXT, rendering_policy
from qim.models import Conversation, MessageRecord, UserMailboxEntry
from qim.infra.stored_json import loads
from qim.windows import edit_deadline_ms, recall_deadline_ms

PREVIEW_MAX_CHARS = 120


def render_preview(
    tenant_id: int, content_type: str, payload_json: str | None, *, sender_id: str, e2ee: bool
) -> str:
    """The text a client can always show, from the type's preview_template. Only `text` shows
    content (its start), and never under E2EE, where the server cannot read it; templates of
    other types may name {sender_id} and {content_type}, never payload fields."""
    return _preview(tenant_id, content_type, payload_json, _UNDECODED, sender_id=sender_id, e2ee=e2ee)


# `_preview`'s payload when the caller has not decoded it (None is a decoded JSON null).
_UNDECODED = object()


def _preview(
    tenant_id: int, content_type: str, payload_json: str | None, payload: Any, *, sender_id: str, e2ee: bool
) -> str:
    """render_preview, given the payload already decoded when the caller decoded it (a SYNC
    row's payload is decoded once for the message object and its preview)."""
    policy = rendering_policy(tenant_id, content_type)
    if policy is None:
        return GENERIC_PLACEHOLDER
    if content_type == TEXT:
        if e2ee or payload_json is None:
            return GENERIC_PLACEHOLDER
        try:
            text = (loads(payload_json) if payload is _UNDECODED else payload).get("text", "")
        except (ValueError, AttributeError):
            return GENERIC_PLACEHOLDER
        return str(text)[:PREVIEW_MAX_CHARS]
    template = policy.preview_template or GENERIC_PLACEHOLDER
    return template.replace("{sender_id}", sender_id).replace("{content_type}", content_type)


def message_object(
    record: MessageRecord, conversation: Conversation, *, viewer_user_pk: int | None = None
) -> dict[str, Any]:
    """The message object of HISTORY_BATCH and mailbox events, in its current state. Shown to
    its sender (`viewer_user_pk`), it carries the recall/edit deadlines while they are open."""
    recalled = record.state in (MessageRecord.RECALLED, MessageRecord.DELETED)
    payload_json = None if recalled else record.payload
    # Decoded once, for the payload and the preview; a text that is not JSON raises here, as before.
    payload = loads(payload_json) if payload_json is not None else None
    message: dict[str, Any] = {
        "conversation_id": record.conversation_id,
        "conversation_seq": record.conversation_seq,
        "message_id": record.message_id,
        "sender_id": record.sender.username,
        "sender_device_id": record.sender_device_id,
        "content_type": record.content_type,
        "payload": payload,
        "preview": "[recalled]" if recalled else _preview(
            record.tenant_id, record.content_type, payload_json, payload,
            sender_id=record.sender.username, e2ee=conversation.e2ee,
        ),
        "sent_at_ms": record.sent_at_ms,
        "state": record.state,
    }
    if record.kind == MessageRecord.MESSAGE:
        message["mentions"] = loads(record.mentions) if record.mentions else []
        message["mention_all"] = record.mention_all
        if record.reply_to_seq is not None:
            message["reply_to"] = reply_quote(record.conversation_id, conversation.e2ee, record.reply_to_seq)
    if record.edited_at_ms is not None:
        message["edited_at_ms"] = record.edited_at_ms
    if record.kind == MessageRecord.MESSAGE and record.target_conversation_seq is not None:
        message["target_conversation_seq"] = record.target_conversation_seq  # anchor_target types
    if viewer_user_pk is not None and viewer_user_pk == record.sender_id:
        message.update(own_deadlines(record, now_ms()))
    return message


def reply_quote(conversation_id: str, e2ee: bool, seq: int) -> dict[str, Any]:
    """The quoted message of a reply as it is now: a recalled one shows as recalled (no
    preview of its content), an erased sender under their erased id; one retention deleted
    shows as `deleted` with no sender or type."""
    target = (
        MessageRecord.objects.select_related("sender")
        .filter(conversation_id=conversation_id, conversation_seq=seq).first()
    )
    if target is None:
        return {"conversation_seq": seq, "sender_id": None, "content_type": None, "preview": "", "state": "deleted"}
    gone = target.state in (MessageRecord.RECALLED, MessageRecord.DELETED)
    return {
        "conversation_seq": seq,
        "sender_id": target.sender.username,
        "content_type": target.content_type,
        "preview": "[recalled]" if gone else render_preview(
            target.tenant_id, target.content_type, target.payload,
            sender_id=target.sender.username, e2ee=e2ee,
        ),
        "state": target.state,
    }


def own_deadlines(record: MessageRecord, now: int) -> dict[str, int]:
    """recallable_until_ms / editable_until_ms of a message while its self windows are open
    (exclusive: RECALL and EDIT are refused from that instant on)."""
    if record.kind != MessageRecord.MESSAGE or record.state not in (MessageRecord.NORMAL, MessageRecord.EDITED):
        return {}
    deadlines = {"recallable_until_ms": recall_deadline_ms(record), "editable_until_ms": edit_deadline_ms(record)}
    return {name: until for name, until in deadlines.items() if now < until}


def control_object(record: MessageRecord) -> dict[str, Any]:
    """A logged control event (membership, recall, edit) as mailbox events carry it."""
    control: dict[str, Any] = {
        "custom_type": record.content_type,
        "conversation_seq": record.conversation_seq,
        "actor_id": record.sender.username,
        "origin_device_id": record.sender_device_id or None,
        "payload": loads(record.payload) if record.payload is not None else None,
    }
    if record.target_conversation_seq is not None:
        control["target_conversation_seq"] = record.target_conversation_seq
    if record.mentions is not None:  # an edit that changed the target's mentions (issue #34)
        control["mentions"] = loads(record.mentions)
        control["mention_all"] = record.mention_all
    return control


def mailbox_event(entry: UserMailboxEntry, conversation: Conversation) -> dict[str, Any]:
    """One entry as SYNC_BATCH carries it; the entry's user is the viewer. A push template
    (no user) renders without deadlines: its body is shared by every recipient."""
    viewer = entry.user_id
    event: dict[str, Any] = {
        "mailbox_seq": entry.mailbox_seq,
        "kind": entry.kind,
        "conversation_id": entry.conversation_id,
    }
    record = entry.message
    if record is not None and record.kind == MessageRecord.MESSAGE:
        event["message"] = message_object(record, conversation, viewer_user_pk=viewer)
    elif record is not None:
        event["control"] = control_object(record)
        if record.timeline_visible:
            # Membership events are timeline rows too: give clients the row as well.
            event["message"] = message_object(record, conversation, viewer_user_pk=viewer)
    else:
        event["control"] = entry.control
    return event
