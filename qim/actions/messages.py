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
from qim.actions.log_rows import AllMembersBut
from qim.clock import now_ms
from qim.content_types import TypePolicy
from qim.infra.db_statements import run_together
from qim.errors import Refused
from qim.models import Conversation, MessageRecord, User
from qim.queries.conversations import (
    MemberSet,
    access_conversation,
    current_member_set,
    intervals_of,
    require_current_member,
)
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
    # As sent: the user ids mentioned (checked against the members under the lock), @all,
    # and the seq replied to.
    mentions: tuple[str, ...] = ()
    mention_all: bool = False
    reply_to: int | None = None

    @property
    def key(self) -> tuple[int, str]:
        return (self.sender.pk, self.client_msg_id)

    def log_row(self, mentioned: dict[int, str]) -> LogRow:
        return LogRow(
            sender=self.sender, sender_device_id=self.device_id, policy=self.policy,
            payload_json=self.payload_json, client_msg_id=self.client_msg_id,
            target_conversation_seq=self.target_conversation_seq,
            mentioned=mentioned, mention_all=self.mention_all, reply_to_seq=self.reply_to,
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
    senders = {request.sender.pk for request in requests}
    mentioned = {user_id for request in requests for user_id in request.mentions}
    statements += [
        capable_members_statement(tenant_id, conversation_id, senders=senders, mentioned=mentioned)
        for tenant_id in tenants
    ]
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
            conversation, members = lock_with_members(
                conversation_id, senders={request.sender.pk for request in requests},
                mentioned={user_id for request in requests for user_id in request.mentions},
            )
        except Conversation.DoesNotExist:
            return [Refused("not_found", "no such conversation") for _ in requests]
        if members.partial and any(request.mention_all for request in requests):
            members = current_member_set(conversation)  # an @all writes to everyone
        outcomes: list[SendAck | Refused | None] = []
        accepted: list[LogRow] = []
        by_id = {user_id: pk for pk, user_id in members.ids.items()}
        for request in requests:
            refusal = _refusal(request, conversation, members) or _address_refusal(request, conversation, members, by_id)
            outcomes.append(refusal)
            if refusal is None:
                accepted.append(request.log_row({by_id[user_id]: user_id for user_id in request.mentions}))
        if not accepted:
            return outcomes  # type: ignore[return-value]
        now = now_ms()
        written: list = []
        for run in _runs(accepted):
            recipients, quiet, live = audience(members, run)
            written += append_rows_to_log(
                conversation, run, recipients=recipients, now_ms=now, online=online, quiet=quiet, live=live,
            )
        appended = iter(written)
    return [outcome or _ack(next(appended).record) for outcome in outcomes]


def _runs(rows: list[LogRow]) -> Iterable[list[LogRow]]:
    """The rows in order, cut where the mailbox audience changes: rows that mention no one
    share theirs (one write for the batch); a row that mentions goes on its own."""
    run: list[LogRow] = []
    for row in rows:
        if row.mentioned or row.mention_all:
            if run:
                yield run
            yield [row]
            run = []
        else:
            run.append(row)
    if run:
        yield run


def audience(
    members: MemberSet, rows: Sequence[LogRow],
) -> tuple[dict[int, str], frozenset[int], dict[int, str] | AllMembersBut]:
    """Who gets mailbox entries for `rows` (design §4.3): every `full` member, the senders
    (their own devices sync their messages), and whom the rows mention; and of those the
    `mention_only` ones (`quiet`); the other members get the rows live only: named, or when
    only some members were read (a large group), every member but the recipients."""
    addressed = {row.sender.pk for row in rows}
    if any(row.mention_all for row in rows):
        addressed.update(members.ids)
    for row in rows:
        addressed.update(row.mentioned)
    recipients, live = members.split(addressed)
    for row in rows:  # a sender who is no member (an admin's event) still gets their entry
        recipients.setdefault(row.sender.pk, row.sender.username)
    if members.partial:
        return recipients, members.quiet & frozenset(recipients), AllMembersBut(frozenset(recipients.values()))
    return recipients, members.quiet & frozenset(recipients), live


def _refusal(request: SendRequest, conversation: Conversation, members: MemberSet) -> Refused | None:
    """Why this request may not be written (the same order as _access_refusal), or None."""
    if conversation.tenant_id != request.sender.tenant_id:  # another tenant's id: as if absent
        return Refused("not_found", "no such conversation")
    if request.sender.pk not in members.ids:
        return Refused("forbidden", "you are not a member of this conversation")
    if request.target_conversation_seq is not None and request.target_conversation_seq > conversation.last_seq:
        return Refused("not_found", f"no message {request.target_conversation_seq} to anchor on")
    return None


def _address_refusal(
    request: SendRequest, conversation: Conversation, members: MemberSet, by_id: dict[str, int]
) -> Refused | None:
    """Mentions of current members only, @all as the group's policy allows, a reply to a
    message the sender can see."""
    for user_id in request.mentions:
        if user_id not in by_id:
            return Refused("bad_request", f"cannot mention {user_id}: not a member of this conversation")
    if request.mention_all and not may_mention_all(conversation, members, request.sender.pk):
        return Refused("forbidden", "only the owner and admins may mention everyone in this group")
    if request.reply_to is not None and not can_see_message(conversation, request.sender.pk, request.reply_to):
        return Refused("not_found", f"no message {request.reply_to} to reply to")
    return None


def may_mention_all(conversation: Conversation, members: MemberSet, user_pk: int) -> bool:
    return conversation.mention_all_policy == Conversation.MEMBERS or members.may_manage(user_pk)


def can_see_message(conversation: Conversation, user_pk: int, seq: int) -> bool:
    """A timeline row at `seq` inside one of the user's intervals."""
    if seq > conversation.last_seq:
        return False
    intervals = intervals_of(conversation.pk, user_pk)
    if not any(interval.covers(seq) for interval in intervals):
        return False
    return MessageRecord.objects.filter(conversation=conversation, conversation_seq=seq, timeline_visible=True).exists()


def _ack(record: MessageRecord) -> SendAck:
    return SendAck(record.message_id, record.conversation_seq, record.sent_at_ms)
