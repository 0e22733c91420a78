"""Whether retention (qim/ops/retention.py) removed what a SYNC or HISTORY asked for.

Neither needs a mark of its own: mailbox_seq and conversation_seq are both allocated gap-free
under a row lock in the transaction that writes the row, and only retention (or a user's or
conversation's deletion) removes rows, so a hole where rows should be is the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from qim.models import Conversation, MembershipInterval, MessageRecord, UserMailboxEntry, UserMailboxHead


def mailbox_truncated(user_pk: int, after_mailbox_seq: int, seqs: Sequence[int], head: int | None = None) -> bool:
    """True when entries between the cursor and the last of `seqs` (the ascending mailbox_seqs
    a SYNC page covers, skipped ones included) are gone; with no `seqs`, when entries after
    the cursor existed and none is left. `head`: the user's mailbox head if the caller read it
    after the page (mailbox_heads, for a burst of SYNCs), else it is read here."""
    expected = after_mailbox_seq + 1
    for seq in seqs:
        if seq != expected:
            return True
        expected += 1
    if seqs:
        return False
    # Read after the page: an entry committed in between is below the head and still there.
    if head is None:
        head = UserMailboxHead.objects.filter(user_id=user_pk).values_list("mailbox_head", flat=True).first() or 0
    if head <= after_mailbox_seq:
        return False
    return not UserMailboxEntry.objects.filter(
        user_id=user_pk, mailbox_seq__gt=after_mailbox_seq, mailbox_seq__lte=head
    ).exists()


def mailbox_heads(user_pks: Sequence[int]) -> dict[int, int]:
    """Each user's mailbox head (0 for none yet), in one query per 500 users: what
    mailbox_truncated reads for an empty page, for a whole burst of SYNCs whose pages came back
    empty (most of a reconnect storm's, when clients missed nothing)."""
    heads = dict.fromkeys(user_pks, 0)
    pks = list(heads)
    for start in range(0, len(pks), 500):
        chunk = pks[start : start + 500]
        heads.update(UserMailboxHead.objects.filter(user_id__in=chunk).values_list("user_id", "mailbox_head"))
    return heads


def history_truncated(
    conversation: Conversation,
    intervals: list[MembershipInterval],
    *,
    after_seq: int | None,
    before_seq: int | None,
    has_more: bool,
) -> bool:
    """True when a HISTORY page reaches down to where the reader asked (after `after_seq`, or
    the start of their first interval) and the log's oldest kept seq is above that."""
    if after_seq is None and has_more:
        return False  # paging backwards, and older rows are still there
    lower = max(after_seq or 0, intervals[0].joined_at if intervals else 0)
    if before_seq is not None and before_seq <= lower + 1:
        return False  # an empty range: nothing asked for can be missing
    oldest = (
        MessageRecord.objects.filter(conversation=conversation)
        .order_by("conversation_seq").values_list("conversation_seq", flat=True).first()
    )
    oldest_kept = oldest if oldest is not None else conversation.last_seq + 1
    return oldest_kept > lower + 1
