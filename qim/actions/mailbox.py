"""Write diffusion: mailbox entries, badges and offline pushes for one logged row.

Every function here joins the caller's transaction (the one that wrote the MessageRecord)
and expects the conversation's row lock to be held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection

from qim.gateway import codec
from qim.models import Device, PushTask, User, UserBadgeState, UserMailboxEntry

# SQLite allows 32 766 bound parameters; stay far below with room for the other columns.
_CHUNK = 2000


def _chunks(items: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def allocate_mailbox_seqs(user_pks: Iterable[int]) -> dict[int, int]:
    """Take the next mailbox_seq of each user: one UPDATE ... RETURNING per chunk.

    On PostgreSQL the user rows are locked in ascending id order first, so two transactions
    writing to overlapping member sets (two groups sharing members) cannot deadlock. On
    SQLite the transaction already holds the database's write lock (IMMEDIATE).
    """
    ordered = sorted(set(user_pks))
    seqs: dict[int, int] = {}
    table = User._meta.db_table
    with connection.cursor() as cursor:
        for chunk in _chunks(ordered):
            if connection.vendor == "postgresql":
                cursor.execute(
                    f"UPDATE {table} SET mailbox_head = mailbox_head + 1 WHERE id IN "
                    f"(SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id FOR UPDATE) "
                    "RETURNING id, mailbox_head",
                    [list(chunk)],
                )
            else:
                marks = ",".join(["%s"] * len(chunk))
                cursor.execute(
                    f"UPDATE {table} SET mailbox_head = mailbox_head + 1 WHERE id IN ({marks}) "
                    "RETURNING id, mailbox_head",
                    list(chunk),
                )
            seqs.update(cursor.fetchall())
    return seqs


def write_mailbox_entries(
    *,
    tenant_id: int,
    conversation_id: str,
    message_id: int | None,
    kind: str,
    recipients: Iterable[int],
    now_ms: int,
    control: dict | None = None,
    origin_device_id: str | None = None,
    origin_user_pk: int | None = None,
) -> dict[int, int]:
    """One UserMailboxEntry per recipient (bulk); answers user pk -> its mailbox_seq. With
    `origin_user_pk`, only that user's entry carries `origin_device_id`: an origin is one
    device of one user, and other users' devices may bear the same device_id."""
    seqs = allocate_mailbox_seqs(recipients)
    UserMailboxEntry.objects.bulk_create(
        [
            UserMailboxEntry(
                tenant_id=tenant_id,
                user_id=user_pk,
                mailbox_seq=seq,
                kind=kind,
                conversation_id=conversation_id,
                message_id=message_id,
                control=control,
                origin_device_id=origin_device_id if origin_user_pk in (None, user_pk) else None,
                created_at_ms=now_ms,
            )
            for user_pk, seq in seqs.items()
        ],
        batch_size=_CHUNK,
    )
    return seqs


def bump_badges(user_pks: Sequence[int], now_ms: int) -> dict[int, int]:
    """badge += 1 for each user, making rows on first use; answers the new badges.

    One upsert per chunk (INSERT ... ON CONFLICT DO UPDATE ... RETURNING, on PostgreSQL and
    SQLite alike), in user order like the mailbox allocation, so concurrent writers to
    overlapping member sets take the rows in the same order.
    """
    if not user_pks:
        return {}
    table = UserBadgeState._meta.db_table
    badges: dict[int, int] = {}
    with connection.cursor() as cursor:
        for chunk in _chunks(sorted(set(user_pks))):
            rows = ",".join(["(%s, 1, %s)"] * len(chunk))
            params = [value for pk in chunk for value in (pk, now_ms)]
            cursor.execute(
                f"INSERT INTO {table} (user_id, badge, updated_at_ms) VALUES {rows} "
                f"ON CONFLICT (user_id) DO UPDATE SET badge = {table}.badge + 1, "
                "updated_at_ms = excluded.updated_at_ms RETURNING user_id, badge",
                params,
            )
            badges.update(cursor.fetchall())
    return badges


def push_capable_devices(user_pks: Sequence[int]) -> list[tuple[int, int, str]]:
    """(device pk, user pk, device_id) of every device of `user_pks` with push credentials."""
    if not user_pks:
        return []
    return list(
        Device.objects.filter(user_id__in=user_pks)
        .exclude(push_token="", voip_token="")
        .values_list("pk", "user_id", "device_id")
    )


def enqueue_offline_pushes(
    *,
    tenant_id: int,
    devices: Sequence[tuple[int, int, str]],
    online_devices: dict[int, set[str]],
    payload_for: dict[int, dict],
    kind: str,
    now_ms: int,
) -> int:
    """A PushTask per device of `devices` (from push_capable_devices) that is not online."""
    tasks = [
        PushTask(
            tenant_id=tenant_id,
            user_id=user_pk,
            device_id=device_pk,
            kind=kind,
            payload=payload_for[user_pk],
            available_at_ms=now_ms,
            created_at_ms=now_ms,
        )
        for device_pk, user_pk, device_id in devices
        if device_id not in online_devices.get(user_pk, ())
    ]
    PushTask.objects.bulk_create(tasks, batch_size=_CHUNK)
    return len(tasks)


def event_push_parts(event_without_seq: dict) -> tuple[str, str]:
    """Split an EVENT frame's JSON around its mailbox_seq so it is encoded once for everyone."""
    marker = "__mailbox_seq__"
    text = codec.encode({"type": "EVENT", "event": {"mailbox_seq": marker, **event_without_seq}})
    head, tail = text.split(f'"{marker}"', 1)
    return head, tail
