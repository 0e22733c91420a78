"""Write diffusion: mailbox entries, badges and offline pushes for one logged row.

Every function here joins the caller's transaction (the one that wrote the MessageRecord)
and expects the conversation's row lock to be held.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from qim.infra import codec
from qim.models import Device, MessageRecord, PushTask, UserBadgeState, UserMailboxEntry, UserMailboxHead

# SQLite allows 32 766 bound parameters; stay far below with room for the other columns.
_CHUNK = 2000


def id_chunks(items: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def bumped_users(increments: dict[int, int]) -> list[int]:
    """The users whose badge goes up, in user order: the order their rows are locked in."""
    return sorted(pk for pk, by in increments.items() if by > 0)


def _pg_int_array(values: Iterable[int]) -> str:
    """A PostgreSQL array literal of integers, bound as one text parameter and cast in SQL
    (`%s::bigint[]`): psycopg dumps a Python list element by element in Python, 1-2 ms for
    a thousand ids, a sixth of a SEND to 1 000 members (docs/performance.md,
    "Batched, set-based SEND on PostgreSQL")."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


@functools.lru_cache(maxsize=16)
def _pg_ids_text(ids: tuple[int, ...]) -> str:
    """_pg_int_array of a chunk of member ids, kept for the next statements that bind the same
    chunk: a SEND batch binds it for the heads and again for the badges, and the next batch
    to the same group binds the same sorted members (0.3 ms a thousand ids, on the batch's
    critical path in the DB thread; issue #22)."""
    return _pg_int_array(ids)


def _heads_sql(chunk: Sequence[int], by: int, *, existing_only: bool = False) -> tuple[str, list]:
    """An upsert ... RETURNING (user pk, new mailbox_head): each user of `chunk` takes `by`
    seqs, the head rows made on first use. With `existing_only` (PostgreSQL), a plain UPDATE
    of the rows that exist, answering only those (qim/actions/log_postgresql.py).

    The rows are taken in ascending user order, so two transactions writing to overlapping
    member sets (two groups sharing members) cannot deadlock on PostgreSQL: the upsert sorts
    its input; the UPDATE needs the primary key's index scan, which the caller forces
    (FORCE_INDEX_SCANS). On SQLite the transaction already holds the database's write lock
    (IMMEDIATE).
    """
    table = UserMailboxHead._meta.db_table
    if connection.vendor == "postgresql" and existing_only:
        sql = (
            f"UPDATE {table} SET mailbox_head = mailbox_head + {int(by)} WHERE user_id = ANY(%s::bigint[]) "
            "RETURNING user_id, mailbox_head"
        )
        return sql, [_pg_ids_text(tuple(chunk))]
    upsert = (
        f"ON CONFLICT (user_id) DO UPDATE SET mailbox_head = {table}.mailbox_head + excluded.mailbox_head "
        "RETURNING user_id, mailbox_head"
    )
    if connection.vendor == "postgresql":
        sql = (
            f"INSERT INTO {table} (user_id, mailbox_head) SELECT user_id, {int(by)} "
            f"FROM unnest(%s::bigint[]) AS ids (user_id) ORDER BY user_id {upsert}"
        )
        return sql, [_pg_ids_text(tuple(chunk))]
    rows = ",".join([f"(%s, {int(by)})"] * len(chunk))
    return f"INSERT INTO {table} (user_id, mailbox_head) VALUES {rows} {upsert}", list(chunk)


def _id_among(column: str, ids: Sequence[int]) -> tuple[str, list]:
    """`column` is one of `ids`: on PostgreSQL one array parameter (psycopg binds a thousand
    separate ids on the client, a few ms per statement), on SQLite a list of marks."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s::bigint[])", [_pg_int_array(ids)]
    return f"{column} IN ({','.join(['%s'] * len(ids))})", list(ids)


@dataclass(frozen=True)
class EntrySpec:
    """One event to put in every recipient's mailbox. With `origin_user_pk`, only that
    user's entry carries `origin_device_id`: an origin is one device of one user, and other
    users' devices may bear the same device_id."""

    kind: str
    message_id: int | None = None
    control: dict | None = None
    origin_device_id: str | None = None
    origin_user_pk: int | None = None

    def origin_for(self, user_pk: int) -> str | None:
        return self.origin_device_id if self.origin_user_pk in (None, user_pk) else None


_ENTRY_COLUMNS = (
    "tenant_id, user_id, mailbox_seq, kind, conversation_id, message_id, control, "
    "origin_device_id, created_at_ms"
)


def write_mailbox_entries(
    *,
    tenant_id: int,
    conversation_id: str,
    specs: Sequence[EntrySpec],
    recipients: Iterable[int],
    now_ms: int,
) -> list[dict[int, int]]:
    """One UserMailboxEntry per recipient for each spec, in the specs' order (a recipient's
    seqs grow with the spec index); answers, per spec, user pk -> its mailbox_seq.

    Set-based, without model instances (a 1 000-member group is 1 000 rows per message,
    docs/performance.md, "Batched, set-based SEND on PostgreSQL"): each recipient's head moves
    once for all the specs. On PostgreSQL one statement per chunk takes the heads and inserts
    the entries from them; on SQLite the heads' upsert ... RETURNING, then one executemany.
    Model signals do not fire for these rows; nothing listens to them.
    """
    per_spec: list[dict[int, int]] = [{} for _ in specs]
    if not specs:
        return per_spec
    with connection.cursor() as cursor:
        for chunk in id_chunks(sorted(set(recipients))):
            if connection.vendor == "postgresql":
                heads = _insert_entries_postgresql(cursor, tenant_id, conversation_id, specs, chunk, now_ms)
            else:
                heads = _insert_entries_sqlite(cursor, tenant_id, conversation_id, specs, chunk, now_ms)
            for user_pk, head in heads:
                first = head - len(specs) + 1
                for index, seqs in enumerate(per_spec):
                    seqs[user_pk] = first + index
    return per_spec


def _insert_entries_postgresql(
    cursor: Any, tenant_id: int, conversation_id: str, specs: Sequence[EntrySpec], chunk: Sequence[int], now_ms: int
) -> list[tuple[int, int]]:
    cursor.execute(*entries_statement(tenant_id, conversation_id, specs, chunk, now_ms))
    return cursor.fetchall()


def entries_statement(
    tenant_id: int, conversation_id: str, specs: Sequence[EntrySpec], chunk: Sequence[int], now_ms: int,
    *, message_seqs: Sequence[int] | None = None, existing_only: bool = False,
) -> tuple[str, list]:
    """PostgreSQL: the heads of `chunk` moved by len(specs) and every entry inserted from them,
    one statement answering (user pk, new head). With `message_seqs` (one per spec) the
    entries' message ids are the conversation's log rows at those seqs, read by the statement
    itself, so it can be sent with the INSERT of those rows (qim/actions/log_postgresql.py).
    With `existing_only` only the users whose head row exists are written (and answered)."""
    heads_sql, heads_params = _heads_sql(chunk, by=len(specs), existing_only=existing_only)
    table = UserMailboxEntry._meta.db_table
    columns = "AS e (ord, kind, message_id, control, origin_user, origin_device)"
    source = f"unnest(%s::int[], %s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::text[]) {columns}"
    by_seq: list = []
    if message_seqs is not None:
        source = (
            f"(SELECT e.ord, e.kind, m.id AS message_id, e.control, e.origin_user, e.origin_device FROM {source} "
            f"JOIN {MessageRecord._meta.db_table} m ON m.conversation_id = %s AND m.conversation_seq = e.message_id) e"
        )
        by_seq = [conversation_id]
    sql = (
        f"WITH heads (user_id, head) AS ({heads_sql}), "
        f"inserted AS (INSERT INTO {table} ({_ENTRY_COLUMNS}) "
        "SELECT %s::bigint, h.user_id, h.head - %s + e.ord, e.kind, %s::text, e.message_id, "
        "e.control::jsonb, CASE WHEN e.origin_user IS NULL OR h.user_id = e.origin_user "
        "THEN e.origin_device END, %s::bigint "
        f"FROM heads h CROSS JOIN {source}) "
        "SELECT user_id, head FROM heads"
    )
    return sql, heads_params + [
        tenant_id, len(specs), conversation_id, now_ms,
        list(range(1, len(specs) + 1)),
        [spec.kind for spec in specs],
        list(message_seqs) if message_seqs is not None else [spec.message_id for spec in specs],
        [_control_json(spec.control) for spec in specs],
        [spec.origin_user_pk for spec in specs],
        [spec.origin_device_id for spec in specs],
    ] + by_seq


def _insert_entries_sqlite(
    cursor: Any, tenant_id: int, conversation_id: str, specs: Sequence[EntrySpec], chunk: Sequence[int], now_ms: int
) -> list[tuple[int, int]]:
    heads_sql, heads_params = _heads_sql(chunk, by=len(specs))
    cursor.execute(heads_sql, heads_params)
    heads = cursor.fetchall()
    controls = [_control_json(spec.control) for spec in specs]
    table = UserMailboxEntry._meta.db_table
    cursor.executemany(
        f"INSERT INTO {table} ({_ENTRY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            (
                tenant_id, user_pk, head - len(specs) + 1 + index, spec.kind, conversation_id,
                spec.message_id, controls[index], spec.origin_for(user_pk), now_ms,
            )
            for user_pk, head in heads
            for index, spec in enumerate(specs)
        ],
    )
    return heads


def _control_json(control: dict | None) -> str | None:
    return None if control is None else json.dumps(control)


def bump_badges(increments: dict[int, int], now_ms: int) -> dict[int, int]:
    """badge += increments[user] for each user, making rows on first use; answers the new
    badges.

    One upsert per chunk (INSERT ... ON CONFLICT DO UPDATE ... RETURNING; on PostgreSQL the
    ids and increments as two array parameters), in user order like the mailbox allocation,
    so concurrent writers to overlapping member sets take the rows in the same order.
    """
    return _bump(increments, now_ms, with_devices=False)[0]


def bump_badges_finding_devices(
    increments: dict[int, int], now_ms: int
) -> tuple[dict[int, int], list[tuple[int, int, str]]]:
    """bump_badges, and push_capable_devices of the users it bumped: on PostgreSQL the two
    in one statement per chunk (the devices' SELECT a UNION ALL beside the upsert's
    RETURNING), a round trip less per SEND batch (issue #22). The new badges answered are
    those of the users with such a device at least (on PostgreSQL only theirs)."""
    if connection.vendor != "postgresql":
        badges = bump_badges(increments, now_ms)
        return badges, push_capable_devices(bumped_users(increments))
    return _bump(increments, now_ms, with_devices=True)


def _bump(increments: dict[int, int], now_ms: int, *, with_devices: bool) -> tuple[dict, list]:
    badges: dict[int, int] = {}
    devices: list[tuple[int, int, str]] = []
    with connection.cursor() as cursor:
        for chunk in id_chunks(bumped_users(increments)):
            cursor.execute(*_badges_statement(chunk, increments, now_ms, with_devices=with_devices))
            read_badge_rows(cursor.fetchall(), badges, devices)
    return badges, devices


def badge_statements(increments: dict[int, int], now_ms: int) -> list[tuple[str, list]]:
    """PostgreSQL: bump_badges_finding_devices as statements to run (one per chunk, in user
    order); give each one's rows to read_badge_rows."""
    chunks = id_chunks(bumped_users(increments))
    return [_badges_statement(chunk, increments, now_ms, with_devices=True) for chunk in chunks]


def _badges_statement(
    chunk: Sequence[int], increments: dict[int, int], now_ms: int, *, with_devices: bool
) -> tuple[str, list]:
    table = UserBadgeState._meta.db_table
    upsert = (
        f"ON CONFLICT (user_id) DO UPDATE SET badge = {table}.badge + excluded.badge, "
        "updated_at_ms = excluded.updated_at_ms RETURNING user_id, badge"
    )
    if connection.vendor != "postgresql":
        rows = ",".join(["(%s, %s, %s)"] * len(chunk))
        params = [value for pk in chunk for value in (pk, increments[pk], now_ms)]
        return f"INSERT INTO {table} (user_id, badge, updated_at_ms) VALUES {rows} {upsert}", params
    sql = (
        f"INSERT INTO {table} (user_id, badge, updated_at_ms) SELECT user_id, by, %s "
        f"FROM unnest(%s::bigint[], %s::int[]) AS ids (user_id, by) ORDER BY user_id {upsert}"
    )
    params = [now_ms, _pg_ids_text(tuple(chunk)), _pg_int_array(increments[pk] for pk in chunk)]
    if with_devices:
        # Only users with a push-capable device get their new badge back: a push is all it is
        # read for, and most members of a big group have none (issue #22). The upsert in the
        # WITH runs to completion whatever the SELECT reads (PostgreSQL's rule for writes there).
        sql = (
            f"WITH b AS ({sql}), d AS (SELECT id, user_id, device_id FROM {Device._meta.db_table} "
            "WHERE user_id = ANY(%s::bigint[]) AND (push_token <> '' OR voip_token <> '')) "
            "SELECT user_id, badge, NULL::bigint, NULL::text FROM b WHERE user_id IN (SELECT user_id FROM d) "
            "UNION ALL SELECT user_id, NULL, id, device_id FROM d"
        )
        params.append(params[1])
    return sql, params


def badge_update_statements(
    increments: dict[int, int], chunks: list[Sequence[int]], now_ms: int
) -> list[tuple[str, list]]:
    """PostgreSQL: the badges' bump as plain UPDATEs of the rows that exist, one per chunk of
    bumped_users, in user order under FORCE_INDEX_SCANS (qim/actions/log_postgresql.py); each
    answers one row, how many badge rows it updated, so the caller can tell whether every row
    existed. The push-capable devices and their users' new badges are read by
    pushable_badges_statements after it."""
    return [_badges_update_statement(chunk, increments, now_ms) for chunk in chunks]


def _badges_update_statement(chunk: Sequence[int], increments: dict[int, int], now_ms: int) -> tuple[str, list]:
    """The increments as the one most members share plus the few that differ (a batch's
    senders, whose own messages do not count for them): no array of a thousand increments to
    build and bind per batch, and the UPDATE reads one table, so the forced index scan sets
    the lock order (a join's order would depend on its plan)."""
    table = UserBadgeState._meta.db_table
    common = collections.Counter(increments[pk] for pk in chunk).most_common(1)[0][0]
    odd = [pk for pk in chunk if increments[pk] != common]
    sql = (
        f"WITH b AS (UPDATE {table} SET badge = badge + %s "
        "+ coalesce((%s::int[])[array_position(%s::bigint[], user_id)], 0), updated_at_ms = %s "
        "WHERE user_id = ANY(%s::bigint[]) RETURNING 1) SELECT count(*) FROM b"
    )
    differences = _pg_int_array(increments[pk] - common for pk in odd)
    return sql, [common, differences, _pg_int_array(odd), now_ms, _pg_ids_text(tuple(chunk))]


def pushable_badges_statements(chunks: list[Sequence[int]]) -> list[tuple[str, list]]:
    """PostgreSQL: (user pk, badge, device pk, device_id) of every push-capable device of the
    users badge_update_statements bumped (the same chunks), with the badge that transaction
    just wrote; sent after the planner settings are back, so the device probe takes the plan
    it would alone (a scan of a small table, the user index of a large one)."""
    badges, devices = UserBadgeState._meta.db_table, Device._meta.db_table
    sql = (
        f"SELECT d.user_id, b.badge, d.id, d.device_id FROM {devices} d JOIN {badges} b ON b.user_id = d.user_id "
        "WHERE d.user_id = ANY(%s::bigint[]) AND (d.push_token <> '' OR d.voip_token <> '')"
    )
    return [(sql, [_pg_ids_text(tuple(chunk))]) for chunk in chunks]


def read_badge_rows(rows: Iterable[tuple], badges: dict[int, int], devices: list[tuple[int, int, str]]) -> None:
    """Sort a badge statement's rows into new badges (user pk -> badge) and push-capable
    devices (device pk, user pk, device_id)."""
    for user_pk, badge, *device in rows:
        if device and device[0] is not None:
            devices.append((device[0], user_pk, device[1]))
        else:
            badges[user_pk] = badge


def push_capable_devices(user_pks: Sequence[int]) -> list[tuple[int, int, str]]:
    """(device pk, user pk, device_id) of every device of `user_pks` with push credentials."""
    table = Device._meta.db_table
    devices: list[tuple[int, int, str]] = []
    with connection.cursor() as cursor:
        for chunk in id_chunks(sorted(set(user_pks))):
            among, params = _id_among("user_id", chunk)
            cursor.execute(
                f"SELECT id, user_id, device_id FROM {table} WHERE {among} "
                "AND (push_token <> '' OR voip_token <> '')",
                params,
            )
            devices += cursor.fetchall()
    return devices


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
