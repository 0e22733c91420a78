"""Erasing one user (a data-protection request): what stays, what goes, what is blanked.

Erasure means (docs/operations.md "Data-protection requests"):
* the account stays as a row, because others' conversations, memberships and reactions name
  it, but renamed `erased-<random>`, display name blank, password unusable, not an admin,
  deactivated (its tokens deleted and sockets closed first, like any deactivation);
* its devices go (with their push credentials and push tasks), and so does everything that
  was only the user's: mailbox entries, read cursors, badge, pending read syncs;
* every message the user sent stays in its conversation, numbered as before, as a tombstone:
  state `deleted`, payload gone (clients render it like a recalled message); the payloads of
  their edit events go too. Control events (joins, leaves) keep their payloads: they carry
  only user ids, which others need to read their own membership history.
Nothing outside the user's tenant is touched: every row is found by the user's own key.
"""

from __future__ import annotations

import secrets
from collections import Counter

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import transaction
from django.db.models import Q

from qim.actions.badges import lower_badges
from qim.actions.credentials import do_deactivate_user
from qim.clock import now_ms
from qim.models import (
    Device,
    MessageRecord,
    PendingReadSync,
    PushTask,
    ReadCursor,
    User,
    UserBadgeState,
    UserMailboxEntry,
)
from qim.queries.conversations import unread_per_reader

EDIT_EVENT = "qim.edit.v1"


def do_erase_user(user: User, *, batch: int | None = None) -> dict[str, int]:
    """Erase `user` as the module says; idempotent. Opens its own transactions (the
    tombstones a batch each, so the sender's long history never holds locks for long): call
    it outside any. Answers the rows changed or deleted by kind."""
    batch = max(1, batch or settings.QIM_RETENTION_BATCH)
    done: Counter[str] = Counter()
    done["tokens_revoked"] = do_deactivate_user(user)
    with transaction.atomic():
        User.objects.filter(pk=user.pk).update(
            username=f"erased-{secrets.token_hex(8)}", display_name="",
            password_hash=make_password(None), is_tenant_admin=False,
        )
        done.update(_deleted(Device.objects.filter(user=user).delete()[1]))
        for rows in (PushTask.objects.filter(user=user), ReadCursor.objects.filter(user=user),
                     UserBadgeState.objects.filter(user=user), PendingReadSync.objects.filter(user=user)):
            done.update(_deleted(rows.delete()[1]))
    done["mailbox_entries"] = _delete_mailbox(user, batch)
    done["messages_tombstoned"] = _tombstone(user, batch)
    return dict(done)


def _deleted(by_label: dict[str, int]) -> Counter[str]:
    return Counter({label: n for label, n in by_label.items() if n})


def _delete_mailbox(user: User, batch: int) -> int:
    total = 0
    while True:
        with transaction.atomic():
            pks = list(UserMailboxEntry.objects.filter(user=user).values_list("pk", flat=True)[:batch])
            UserMailboxEntry.objects.filter(pk__in=pks).delete()
        total += len(pks)
        if len(pks) < batch:
            return total


def _tombstone(user: User, batch: int) -> int:
    """Blank the user's messages (state `deleted`, no payload) and their edit events'
    payloads, a batch per transaction, by primary key."""
    pending = MessageRecord.objects.filter(
        Q(kind=MessageRecord.MESSAGE) & ~Q(state=MessageRecord.DELETED)
        | Q(content_type=EDIT_EVENT, payload__isnull=False),
        sender=user,
    )
    total = 0
    while True:
        with transaction.atomic():
            # Locked before the badges (the order recall keeps); a tombstone is not unread.
            found = list(pending.select_for_update().order_by("pk").values_list("pk", "conversation_id", "conversation_seq")[:batch])
            pks = [pk for pk, _, _ in found]
            _uncount_tombstones(user, found)
            rows = MessageRecord.objects.filter(pk__in=pks)
            total += rows.filter(kind=MessageRecord.MESSAGE).update(state=MessageRecord.DELETED, payload=None)
            rows.filter(content_type=EDIT_EVENT).update(payload=None)
        if len(pks) < batch:
            return total


def _uncount_tombstones(user: User, found: list[tuple[int, str, int]]) -> None:
    """Lower other readers' stored badges by the user's rows about to become tombstones, per
    conversation over the seq range the batch spans (its rows there are the user's pending
    ones in that range: a batch takes them in pk order, which is seq order in a conversation)."""
    spans: dict[str, tuple[int, int]] = {}
    for _, conversation_id, seq in found:
        low, high = spans.get(conversation_id, (seq, seq))
        spans[conversation_id] = (min(low, seq), max(high, seq))
    per_user: Counter[int] = Counter()
    for conversation_id, (low, high) in spans.items():
        per_user.update(unread_per_reader(conversation_id, low, high, user.pk))
    lower_badges(dict(per_user), now_ms())  # once: every badge lock in user order
