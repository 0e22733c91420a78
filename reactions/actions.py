"""REACT's write path (design §4): idempotent per (tenant, conversation, seq, user, key).

Never a UserMailboxEntry, never an unread, badge, order or preview change, never a PushTask:
the only rows touched are this message's summary and its details or fingerprints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from qim.clock import now_ms
from qim.conf import limit
from qim.errors import Refused
from qim.models import Conversation, MembershipInterval, MessageRecord
from reactions.member_cache import member_counts
from reactions.models import MessageReaction, MessageReactionSummary, ReactionFingerprint

Pair = tuple[int, str]  # (user pk, reaction_key)


@dataclass(frozen=True)
class ReactRequest:
    """One REACT frame, as the batch sees it: who, which key, add or remove."""

    user_pk: int
    reaction_key: str
    action: str


@dataclass(frozen=True)
class ReactOutcome:
    conversation_id: str
    conversation_seq: int
    counts: dict[str, int]  # shared by outcomes of one batch with the same state: read only
    summary_version: int
    changed: bool


def member_count(conversation_id: str) -> int:
    """Cached (reactions/member_cache.py): counting 100 000 intervals on every REACT would not do."""
    return member_counts.get(
        conversation_id,
        lambda: MembershipInterval.objects.filter(conversation_id=conversation_id, left_at__isnull=True).count(),
    )


def fingerprint(user_pk: int, reaction_key: str) -> int:
    digest = hashlib.blake2b(f"{user_pk}\x00{reaction_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def check_reactors(conversation: Conversation, seq: int, user_pks: Iterable[int]) -> dict[int, Refused]:
    """The refusal of each of `user_pks` who cannot see message `seq`: `forbidden` for
    outsiders, `not_found` for a seq outside all their intervals. One query for all of them.

    Read outside the REACT transaction: intervals only ever close after the seqs they cover,
    so the answer for an existing message cannot change under us.
    """
    wanted = set(user_pks)
    covered: dict[int, bool] = {}
    rows = MembershipInterval.objects.filter(conversation=conversation, user_id__in=wanted).values_list(
        "user_id", "joined_at", "left_at"
    )
    for user_pk, joined_at, left_at in rows:
        # Values, not model instances: a batch reads up to 500 users' intervals.
        covered[user_pk] = covered.get(user_pk, False) or MembershipInterval.span_covers(joined_at, left_at, seq)
    refusals: dict[int, Refused] = {}
    for user_pk in wanted:
        if user_pk not in covered:
            refusals[user_pk] = Refused("forbidden", "you are not a member of this conversation")
        elif not covered[user_pk]:
            refusals[user_pk] = Refused("not_found", f"no message {seq} that you can see")
    return refusals


def _lock_target(conversation: Conversation, seq: int) -> bool:
    """Take the target message's row lock (PostgreSQL: FOR NO KEY UPDATE, what the recall's
    UPDATE takes) and answer whether it is a message (not a control event) neither recalled
    nor deleted.

    Lock order: the message row, then its summary row (`_locked_summary`), as the recall's
    second step does (`qim.actions.recall.do_apply_recall`: UPDATE of the row, then the delete
    of the aggregate). So a batch that sees the message visible keeps it so until it commits,
    and a recall committed meanwhile is seen: it deletes what the batch wrote, or the batch
    reads `recalled` and writes nothing. SQLite has no row locks and ignores this; there every
    write transaction is BEGIN IMMEDIATE (qim/settings/__init__.py), so writers run one at a time anyway.
    """
    states = MessageRecord.objects.select_for_update(no_key=True).filter(
        conversation=conversation, conversation_seq=seq, kind=MessageRecord.MESSAGE
    ).values_list("state", flat=True)
    return any(state not in (MessageRecord.RECALLED, MessageRecord.DELETED) for state in states)


def _locked_summary(conversation: Conversation, seq: int) -> MessageReactionSummary:
    """The message's summary under its row lock (created on first use): batches of REACTs to
    one message serialize here, on every node."""
    locked = MessageReactionSummary.objects.select_for_update().filter(conversation=conversation, conversation_seq=seq)
    summary = locked.first()
    if summary is not None:
        return summary
    try:
        with transaction.atomic():
            MessageReactionSummary.objects.get_or_create(
                conversation=conversation, conversation_seq=seq, defaults={"tenant_id": conversation.tenant_id}
            )
    except IntegrityError:
        pass  # another node's REACT made it first
    return locked.get()


@dataclass
class _Stored:
    """A batch's view of the message's rows for the pairs it touches: read once, changed in
    memory REACT by REACT, written back as one diff."""

    details: set[Pair]
    fingerprints: set[int]


def _stored(conversation: Conversation, summary: MessageReactionSummary, fps: dict[Pair, int]) -> _Stored:
    details: set[Pair] = set()
    if summary.detail_rows:  # the summary counts its details: none, nothing to read
        rows = MessageReaction.objects.filter(
            conversation=conversation, conversation_seq=summary.conversation_seq,
            user_id__in={pk for pk, _ in fps}, reaction_key__in={key for _, key in fps},
        ).values_list("user_id", "reaction_key")
        details = {pair for pair in rows if pair in fps}
    found = ReactionFingerprint.objects.filter(summary=summary, fingerprint__in=set(fps.values()))
    return _Stored(details, set(found.values_list("fingerprint", flat=True)))


def _write_diff(conversation: Conversation, summary: MessageReactionSummary, before: _Stored, after: _Stored,
                fps: dict[Pair, int]) -> None:
    seq = summary.conversation_seq
    gone: dict[str, list[int]] = {}
    for user_pk, key in before.details - after.details:
        gone.setdefault(key, []).append(user_pk)
    for key, user_pks in gone.items():  # one statement per key: a few keys, many users
        MessageReaction.objects.filter(
            conversation=conversation, conversation_seq=seq, reaction_key=key, user_id__in=user_pks
        ).delete()
    if gone_fps := before.fingerprints - after.fingerprints:
        ReactionFingerprint.objects.filter(summary=summary, fingerprint__in=gone_fps).delete()
    created_at = now_ms()
    MessageReaction.objects.bulk_create([
        MessageReaction(tenant_id=conversation.tenant_id, conversation=conversation, conversation_seq=seq,
                        user_id=user_pk, reaction_key=key, created_at_ms=created_at)
        for user_pk, key in after.details - before.details
    ])
    ReactionFingerprint.objects.bulk_create([
        ReactionFingerprint(summary=summary, fingerprint=fp) for fp in after.fingerprints - before.fingerprints
    ])


def _apply(conversation: Conversation, summary: MessageReactionSummary, requests: list[ReactRequest],
           small_group: bool) -> list[ReactOutcome | Refused]:
    """Each REACT in arrival order against the in-memory state, exactly as one transaction
    per REACT would have done it; then one write of the difference and one summary update.
    An add of a key the message does not carry yet, when it carries
    `reaction_max_keys_per_message` already, is refused `conflict`."""
    seq = summary.conversation_seq
    fps = {(r.user_pk, r.reaction_key): fingerprint(r.user_pk, r.reaction_key) for r in requests}
    before = _stored(conversation, summary, fps)
    state = _Stored(set(before.details), set(before.fingerprints))
    counts, version, detail_rows = dict(summary.counts), summary.summary_version, summary.detail_rows
    max_details = limit("reaction_detail_max_per_message")
    max_keys = limit("reaction_max_keys_per_message")
    snapshot = dict(counts)
    outcomes: list[ReactOutcome | Refused] = []
    for request in requests:
        pair = (request.user_pk, request.reaction_key)
        present = pair in state.details or fps[pair] in state.fingerprints
        if request.action == "add" and not present:
            if request.reaction_key not in counts and len(counts) >= max_keys:
                outcomes.append(Refused("conflict", f"this message already has {len(counts)} different reactions, the most it can have"))
                continue
            if small_group and detail_rows < max_details:
                state.details.add(pair)
                detail_rows += 1
            else:
                state.fingerprints.add(fps[pair])
        elif request.action == "remove" and pair in state.details:
            state.details.discard(pair)
            detail_rows -= 1
        elif request.action == "remove" and fps[pair] in state.fingerprints:
            state.fingerprints.discard(fps[pair])
        else:  # a repeated add, or a remove of something absent: succeeds, changes nothing
            outcomes.append(ReactOutcome(conversation.pk, seq, snapshot, version, False))
            continue
        counts[request.reaction_key] = counts.get(request.reaction_key, 0) + (1 if request.action == "add" else -1)
        if counts[request.reaction_key] <= 0:
            del counts[request.reaction_key]
        version += 1
        snapshot = dict(counts)
        outcomes.append(ReactOutcome(conversation.pk, seq, snapshot, version, True))
    if version != summary.summary_version:
        _write_diff(conversation, summary, before, state, fps)
        summary.counts, summary.summary_version, summary.detail_rows = counts, version, detail_rows
        summary.updated_at_ms = now_ms()
        summary.save(update_fields=["counts", "summary_version", "detail_rows", "updated_at_ms"])
    return outcomes


def do_react_batch(conversation: Conversation, seq: int, requests: list[ReactRequest]) -> list[ReactOutcome | Refused]:
    """Add or remove reactions on one message, many REACTs at once; opens its own transaction
    and holds in it the message's row lock, then its summary's (one locked read each per
    batch, not per REACT): a recall's second step, which takes them in the same order, runs
    wholly before or wholly after the batch (open item 11 of docs/architecture.md, closed).

    The answers line up with `requests`: each is that REACT's own outcome, as if the batch had
    run one REACT after another in its order (counts and version right after it), or its own
    refusal (as check_reactors; `not_found` for all when the message is gone). A repeated add,
    or a remove of something absent, succeeds with `changed: False`. Emits nothing: the caller
    pushes after commit.
    """
    refusals = check_reactors(conversation, seq, (r.user_pk for r in requests))
    answers: list[ReactOutcome | Refused | None] = [
        Refused(refusals[r.user_pk].code, refusals[r.user_pk].message) if r.user_pk in refusals else None
        for r in requests
    ]
    accepted = [i for i, answer in enumerate(answers) if answer is None]
    if not accepted:
        return answers  # type: ignore[return-value]
    small_group = any(requests[i].action == "add" for i in accepted) and (
        member_count(conversation.pk) <= limit("reaction_detail_max_members")
    )
    with transaction.atomic():
        if not _lock_target(conversation, seq):
            for i in accepted:
                answers[i] = Refused("not_found", f"no message {seq} to react to")
        else:
            summary = _locked_summary(conversation, seq)
            outcomes = _apply(conversation, summary, [requests[i] for i in accepted], small_group)
            for i, outcome in zip(accepted, outcomes):
                answers[i] = outcome
    return answers  # type: ignore[return-value]


def do_delete_reactions(conversation_id: str, conversation_seq: int) -> int:
    """Recall or deletion of the message: its aggregate and details go, physically (§4).
    Joins the caller's transaction, which has locked (updated) the message's row first: the
    lock order of do_react_batch, so a batch cannot write between the state and this."""
    details, _ = MessageReaction.objects.filter(conversation_id=conversation_id, conversation_seq=conversation_seq).delete()
    summaries, _ = MessageReactionSummary.objects.filter(
        conversation_id=conversation_id, conversation_seq=conversation_seq
    ).delete()  # fingerprints cascade
    return details + summaries
