"""SEND of persistent messages: idempotent per (user, client_msg_id); the SENDs to one
conversation that queue behind each other are checked and written together in one DB-thread
call and one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import or_

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from qim.actions.log import LogRow, append_rows_to_log, lock_with_members
from qim.clock import now_ms
from qim.content_types import TypePolicy
from qim.infra.db_statements import run_together
from qim.errors import Refused
from qim.models import Conversation, MessageRecord, User
from qim.queries.conversations import access_conversation, require_current_member
from qim.queries.online import NOT_ASKED, OnlineDevices, capable_members_statement, online_devices_of


@dataclass(frozen=True)
class SendAck:
    message_id: str
    conversation_seq: int
    sent_at_ms: int

    def frame(self) -> dict:
        return {"type": "ACK", **self.__dict__}


@dataclass(frozen=True)
class SendRequest:
    """One SEND the frame handler has checked (type, size). `rate_refusal` is what the
    sender's rate budget answered: it is given only once the SEND is known to be neither a
    retry nor another tenant's or a non-member's (qim/frames/messaging.py)."""

    sender: User
    device_id: str
    client_msg_id: str
    policy: TypePolicy
    payload_json: str
    target_conversation_seq: int | None = None
    rate_refusal: Refused | None = None

    @property
    def key(self) -> tuple[int, str]:
        return (self.sender.pk, self.client_msg_id)

    def log_row(self) -> LogRow:
        return LogRow(
            sender=self.sender, sender_device_id=self.device_id, policy=self.policy,
            payload_json=self.payload_json, client_msg_id=self.client_msg_id,
            target_conversation_seq=self.target_conversation_seq,
        )


def earlier_sends(conversation_id: str, requests: Sequence[SendRequest]) -> dict[tuple[int, str], SendAck | Refused]:
    """For each (sender, client_msg_id) already logged: its first ACK, or `conflict` when it
    was used for another conversation (a retry names the same one; anything else is a client
    bug that must not pass for a delivered message)."""
    return _earlier_from(conversation_id, _earlier_query(requests))


def _earlier_query(requests: Sequence[SendRequest]) -> QuerySet:
    """The logged rows of the requests' keys. No ORDER BY: the pair is unique, and an
    ORDER BY id let PostgreSQL walk the log's primary key."""
    wanted = reduce(or_, (Q(sender_id=pk, client_msg_id=msg_id) for pk, msg_id in {r.key for r in requests}))
    return MessageRecord.objects.filter(wanted).order_by().values_list(
        "sender_id", "client_msg_id", "conversation_id", "message_id", "conversation_seq", "sent_at_ms",
    )


def _earlier_statement(requests: Sequence[SendRequest]) -> tuple[str, list]:
    """_earlier_query as SQL written out, not compiled by the ORM for every SEND batch (issue
    #22: compiling it was most of the batch's node time before the lock)."""
    keys = sorted({r.key for r in requests})
    meta = MessageRecord._meta
    where = " OR ".join(["(sender_id = %s AND client_msg_id = %s)"] * len(keys))
    sql = (
        "SELECT sender_id, client_msg_id, conversation_id, message_id, conversation_seq, sent_at_ms "
        f"FROM {meta.db_table} WHERE {where}"
    )
    return sql, [value for key in keys for value in key]


def _earlier_from(conversation_id: str, rows: Iterable[tuple]) -> dict[tuple[int, str], SendAck | Refused]:
    found: dict[tuple[int, str], SendAck | Refused] = {}
    for sender_pk, client_msg_id, in_conversation, *ack in rows:
        found[(sender_pk, client_msg_id)] = (
            SendAck(*ack) if in_conversation == conversation_id
            else Refused("conflict", f"client_msg_id {client_msg_id!r} was used for another conversation")
        )
    return found


def _read_before_lock(
    conversation_id: str, requests: Sequence[SendRequest],
) -> tuple[dict[tuple[int, str], SendAck | Refused], dict[int, set[str]]]:
    """earlier_sends, and per sender tenant of a counted request the conversation's members
    who could get a push (qim.queries.online), in one round trip on PostgreSQL (issue #22).
    The members are read for every counted request, also those that turn out retries."""
    tenants = sorted({request.sender.tenant_id for request in requests if request.policy.counts_unread})
    statements = [_earlier_statement(requests)]
    statements += [capable_members_statement(tenant_id, conversation_id) for tenant_id in tenants]
    earlier, *members = run_together(statements)
    return _earlier_from(conversation_id, earlier), {
        tenant_id: {user_id for (user_id,) in rows} for tenant_id, rows in zip(tenants, members)
    }


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
    """Check and log persistent messages to one conversation, in order, and diffuse each to
    every current member's mailbox; answers one outcome per request.

    The caller has checked the types and the sizes. A retry with the same client_msg_id
    answers the first ACK and writes nothing, also when two retries race (the
    unique constraint decides: then the batch is undone and written again one request at a
    time); a client_msg_id used for another conversation gets `conflict`. Another tenant's
    conversation is `not_found`, non-members get `forbidden`, an anchor past the head
    `not_found`; then a request's `rate_refusal`; the others are written, in one transaction
    under the conversation's lock.
    """
    outcomes, capable = _read_before_lock(conversation_id, requests)
    fresh: dict[tuple[int, str], SendRequest] = {}  # within a batch, one of each key is written
    for request in requests:
        if request.key in outcomes or request.key in fresh:
            continue
        if request.rate_refusal is not None:  # refused anyway: no write lock for it
            outcomes[request.key] = _access_refusal(conversation_id, request) or request.rate_refusal
        else:
            fresh[request.key] = request
    to_write = list(fresh.values())
    online = _online_before_lock(to_write, capable)
    if len(to_write) > 1:
        try:
            written = _write_sends(conversation_id, to_write, online)
        except IntegrityError:  # a retry raced another node: settle them one by one
            written = [_write_one(conversation_id, request, online) for request in to_write]
    else:
        written = [_write_one(conversation_id, request, online) for request in to_write]
    outcomes.update(zip(fresh, written))
    return [outcomes[request.key] for request in requests]


def _online_before_lock(requests: Sequence[SendRequest], capable: dict[int, set[str]]) -> OnlineDevices:
    """Who is connected, asked of the presence directory before the lock (qim.queries.online),
    when any request counts; per sender tenant, of which at most one owns the conversation."""
    tenants = {request.sender.tenant_id for request in requests if request.policy.counts_unread}
    online: dict = {}
    for tenant_id in sorted(tenants):
        online.update(online_devices_of(tenant_id, capable[tenant_id]))
    return online or NOT_ASKED


def _access_refusal(conversation_id: str, request: SendRequest) -> Refused | None:
    try:
        conversation = access_conversation(request.sender.tenant_id, conversation_id)
        require_current_member(conversation, request.sender.pk)
    except Refused as refusal:
        return refusal
    return None


def _write_one(conversation_id: str, request: SendRequest, online: OnlineDevices) -> SendAck | Refused:
    try:
        [outcome] = _write_sends(conversation_id, [request], online)
        return outcome
    except IntegrityError:
        earlier = earlier_sends(conversation_id, [request]).get(request.key)
        if earlier is None:
            raise
        return earlier


def _write_sends(
    conversation_id: str, requests: Sequence[SendRequest], online: OnlineDevices,
) -> list[SendAck | Refused]:
    with transaction.atomic():
        try:
            conversation, members = lock_with_members(conversation_id)
        except Conversation.DoesNotExist:
            return [Refused("not_found", "no such conversation") for _ in requests]
        outcomes: list[SendAck | Refused | None] = []
        accepted: list[SendRequest] = []
        for request in requests:
            refusal = _refusal(request, conversation, members)
            outcomes.append(refusal)
            if refusal is None:
                accepted.append(request)
        if not accepted:
            return outcomes  # type: ignore[return-value]
        appended = iter(append_rows_to_log(
            conversation, [request.log_row() for request in accepted], recipients=members, now_ms=now_ms(),
            online=online,
        ))
    return [outcome or _ack(next(appended).record) for outcome in outcomes]


def _refusal(request: SendRequest, conversation: Conversation, members: dict[int, str]) -> Refused | None:
    """Why this request may not be written (the same order as _access_refusal), or None."""
    if conversation.tenant_id != request.sender.tenant_id:  # another tenant's id: as if absent
        return Refused("not_found", "no such conversation")
    if request.sender.pk not in members:
        return Refused("forbidden", "you are not a member of this conversation")
    if request.target_conversation_seq is not None and request.target_conversation_seq > conversation.last_seq:
        return Refused("not_found", f"no message {request.target_conversation_seq} to anchor on")
    return None


def _ack(record: MessageRecord) -> SendAck:
    return SendAck(record.message_id, record.conversation_seq, record.sent_at_ms)
