"""SEND of a persistent message: idempotent per (user, client_msg_id), one transaction."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from qim.actions.log import append_to_log, lock_conversation
from qim.clock import now_ms
from qim.content_types import TypePolicy
from qim.errors import Refused
from qim.models import MessageRecord, User
from qim.queries.conversations import current_members


@dataclass(frozen=True)
class SendAck:
    message_id: str
    conversation_seq: int
    sent_at_ms: int

    def frame(self) -> dict:
        return {"type": "ACK", **self.__dict__}


def earlier_send(sender_pk: int, client_msg_id: str) -> SendAck | None:
    record = MessageRecord.objects.filter(sender_id=sender_pk, client_msg_id=client_msg_id).first()
    if record is None:
        return None
    return SendAck(record.message_id, record.conversation_seq, record.sent_at_ms)


def do_send_message(
    sender: User,
    device_id: str,
    conversation_id: str,
    client_msg_id: str,
    policy: TypePolicy,
    payload_json: str,
    *,
    target_conversation_seq: int | None = None,
) -> SendAck:
    """Log a persistent message and diffuse it to every current member's mailbox.

    The caller has checked the tenant (access_conversation), the type and the size. A retry
    with the same client_msg_id answers the first ACK and writes nothing, also when two
    retries race (the unique constraint decides). Non-members get `forbidden`.
    """
    earlier = earlier_send(sender.pk, client_msg_id)
    if earlier is not None:
        return earlier
    try:
        with transaction.atomic():
            conversation = lock_conversation(conversation_id)
            members = current_members(conversation.pk)
            if sender.pk not in members:
                raise Refused("forbidden", "you are not a member of this conversation")
            if target_conversation_seq is not None and target_conversation_seq > conversation.last_seq:
                raise Refused("not_found", f"no message {target_conversation_seq} to anchor on")
            appended = append_to_log(
                conversation,
                sender=sender,
                sender_device_id=device_id,
                policy=policy,
                payload_json=payload_json,
                recipients=members,
                now_ms=now_ms(),
                client_msg_id=client_msg_id,
                target_conversation_seq=target_conversation_seq,
            )
    except IntegrityError:
        earlier = earlier_send(sender.pk, client_msg_id)
        if earlier is None:
            raise
        return earlier
    record = appended.record
    return SendAck(record.message_id, record.conversation_seq, record.sent_at_ms)
