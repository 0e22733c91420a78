"""SEND of persistent messages: idempotent per (user, client_msg_id); the SENDs to one
conversation that queue behind each other are written together in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from qim.actions.log import LogRow, append_rows_to_log, lock_conversation
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


@dataclass(frozen=True)
class SendRequest:
    """One SEND the frame handler has checked (tenant, type, size, rate)."""

    sender: User
    device_id: str
    client_msg_id: str
    policy: TypePolicy
    payload_json: str
    target_conversation_seq: int | None = None

    def log_row(self) -> LogRow:
        return LogRow(
            sender=self.sender, sender_device_id=self.device_id, policy=self.policy,
            payload_json=self.payload_json, client_msg_id=self.client_msg_id,
            target_conversation_seq=self.target_conversation_seq,
        )


def earlier_send(sender_pk: int, client_msg_id: str) -> SendAck | None:
    """The ACK of the sender's earlier SEND with this client_msg_id, if any. No ORDER BY: the
    pair is unique, and `.first()`'s ORDER BY id let PostgreSQL walk the log's primary key."""
    found = (
        MessageRecord.objects.filter(sender_id=sender_pk, client_msg_id=client_msg_id)
        .order_by()
        .values_list("message_id", "conversation_seq", "sent_at_ms")[:1]
    )
    return next((SendAck(*row) for row in found), None)


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
    """do_send_messages for one SEND; raises its Refused."""
    request = SendRequest(sender, device_id, client_msg_id, policy, payload_json, target_conversation_seq)
    [outcome] = do_send_messages(conversation_id, [request])
    if isinstance(outcome, Refused):
        raise outcome
    return outcome


def do_send_messages(conversation_id: str, requests: Sequence[SendRequest]) -> list[SendAck | Refused]:
    """Log persistent messages to one conversation, in order, and diffuse each to every
    current member's mailbox; answers one outcome per request.

    The caller has checked the tenant (access_conversation), the types and the sizes. Opens
    the transaction and takes the conversation's lock. A retry with the same client_msg_id
    answers the first ACK and writes nothing, also when two retries race (the unique
    constraint decides: then the batch is undone and written again one request at a time).
    Non-members get `forbidden`, an anchor past the head `not_found`; the others are written.
    """
    # The frame handler looked for an earlier SEND just before (check_send_allowed); a retry
    # racing its original is settled by the unique constraint. Within a batch, one is written.
    fresh: list[SendRequest] = []
    for request in requests:
        if all((r.sender.pk, r.client_msg_id) != (request.sender.pk, request.client_msg_id) for r in fresh):
            fresh.append(request)
    if len(fresh) > 1:
        try:
            written = _write_sends(conversation_id, fresh)
        except IntegrityError:  # a retry raced another node: settle them one by one
            written = [_write_one(conversation_id, request) for request in fresh]
    else:
        written = [_write_one(conversation_id, request) for request in fresh]
    by_key = {(r.sender.pk, r.client_msg_id): outcome for r, outcome in zip(fresh, written)}
    return [by_key[(r.sender.pk, r.client_msg_id)] for r in requests]


def _write_one(conversation_id: str, request: SendRequest) -> SendAck | Refused:
    try:
        [outcome] = _write_sends(conversation_id, [request])
        return outcome
    except IntegrityError:
        earlier = earlier_send(request.sender.pk, request.client_msg_id)
        if earlier is None:
            raise
        return earlier


def _write_sends(conversation_id: str, requests: Sequence[SendRequest]) -> list[SendAck | Refused]:
    with transaction.atomic():
        conversation = lock_conversation(conversation_id)
        members = current_members(conversation.pk)
        outcomes: list[SendAck | Refused | None] = []
        accepted: list[SendRequest] = []
        for request in requests:
            refusal = _refusal(request, members, conversation.last_seq)
            outcomes.append(refusal)
            if refusal is None:
                accepted.append(request)
        if not accepted:
            return outcomes  # type: ignore[return-value]
        appended = iter(append_rows_to_log(
            conversation, [request.log_row() for request in accepted], recipients=members, now_ms=now_ms(),
        ))
    return [outcome or _ack(next(appended).record) for outcome in outcomes]


def _refusal(request: SendRequest, members: dict[int, str], last_seq: int) -> Refused | None:
    if request.sender.pk not in members:
        return Refused("forbidden", "you are not a member of this conversation")
    if request.target_conversation_seq is not None and request.target_conversation_seq > last_seq:
        return Refused("not_found", f"no message {request.target_conversation_seq} to anchor on")
    return None


def _ack(record: MessageRecord) -> SendAck:
    return SendAck(record.message_id, record.conversation_seq, record.sent_at_ms)
