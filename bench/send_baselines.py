"""The database-only baselines of bench/send_fanout.py: the rows one SEND writes, without QIM.

`raw_sql_baseline`: one transaction per message, the log row and the mailbox rows by
`executemany` (the first issue's baseline, kept for its ratios).

The COPY baseline (PostgreSQL, issue #22 item 5; `copy_prepare`, `copy_slice`, `copy_check`): what one QIM SEND batch commits, written the
fastest way PostgreSQL takes rows. In one transaction per batch of COPY_BATCH messages: the
conversation row's head, the log rows (one multi-row INSERT ... RETURNING, for their ids),
every member's mailbox rows with ONE `COPY ... FROM STDIN`, and the counters a SEND moves:
each member's mailbox head and badge (one set-based UPDATE each; the rows made beforehand,
as QIM's exist after a member's first message). The tables are copies of QIM's own
(`CREATE TABLE ... (LIKE qim_... INCLUDING ALL)`: the same columns, checks, indexes and
fillfactor) without foreign keys, in a QIM-migrated throwaway database.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

# QIM commits about 2 SENDs per transaction under 4 closed-loop senders to one group (the
# `SENDs/txn` column of send_fanout.py: 2.0 at 1 000 members), so the baseline does too.
COPY_BATCH = 2

# Baseline table -> the QIM table it copies.
_TABLES = {
    "bench_conversation": "qim_conversation",
    "bench_log": "qim_messagerecord",
    "bench_mailbox": "qim_usermailboxentry",
    "bench_head": "qim_usermailboxhead",
    "bench_badge": "qim_userbadgestate",
}
_LOG_COLUMNS = (
    "tenant_id, conversation_id, conversation_seq, message_id, kind, sender_id, sender_device_id, "
    "client_msg_id, content_type, payload, sent_at_ms, state, counts_unread, affects_session_order, "
    "timeline_visible"
)
_MAILBOX_COPY = (
    "COPY bench_mailbox (tenant_id, user_id, mailbox_seq, kind, conversation_id, message_id, control, "
    "origin_device_id, created_at_ms) FROM STDIN"
)


def raw_sql_baseline(kind: str, url: str, members: int, seconds: float) -> dict[str, Any]:
    """The same rows per message through the database driver directly, one transaction each."""
    if kind == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        mark = "?"
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        mark = "%s"
    conn.execute("CREATE TABLE IF NOT EXISTS bench_log (seq BIGINT PRIMARY KEY, payload TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_mailbox (user_id BIGINT, mailbox_seq BIGINT, log_seq BIGINT, PRIMARY KEY (user_id, mailbox_seq))")
    seq = 0
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < deadline:
        seq += 1
        rows = [(user, seq, seq) for user in range(members)]
        if kind == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"INSERT INTO bench_log VALUES ({mark}, {mark})", (seq, "x" * 64))
            conn.executemany(f"INSERT INTO bench_mailbox VALUES ({mark}, {mark}, {mark})", rows)
            conn.execute("COMMIT")
        else:
            with conn.transaction():
                conn.execute(f"INSERT INTO bench_log VALUES ({mark}, {mark})", (seq, "x" * 64))
                with conn.cursor() as cur:
                    cur.executemany(f"INSERT INTO bench_mailbox VALUES ({mark}, {mark}, {mark})", rows)
    elapsed = time.monotonic() - started
    conn.close()
    return {"messages": seq, "elapsed": elapsed}


def _copy_tables(conn: Any, members: int) -> None:
    """The baseline's tables shaped like QIM's, and each member's head and badge row."""
    for table, model_table in _TABLES.items():
        conn.execute(f"CREATE TABLE {table} (LIKE {model_table} INCLUDING ALL)")
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s", (model_table,)).fetchone()[0]
        if options:
            conn.execute(f"ALTER TABLE {table} SET ({', '.join(options)})")
    conn.execute(
        "INSERT INTO bench_conversation (id, tenant_id, kind, title, e2ee, last_seq, last_activity_seq, "
        "last_activity_ms, created_at) VALUES ('c', 1, 'group', '', false, 0, 0, 0, now())"
    )
    conn.execute("INSERT INTO bench_head SELECT u, 0 FROM generate_series(1, %s) AS u", (members,))
    conn.execute("INSERT INTO bench_badge SELECT u, 0, 0 FROM generate_series(1, %s) AS u", (members,))
    conn.execute("VACUUM ANALYZE")


def _write_batch(conn: Any, first_seq: int, members: int, member_ids: str) -> None:
    """One batch of COPY_BATCH messages from user 1 to users 1..members, as one transaction."""
    now = int(time.time() * 1000)
    seqs = range(first_seq, first_seq + COPY_BATCH)
    with conn.transaction():
        conn.execute(
            "UPDATE bench_conversation SET last_seq = %s, last_activity_seq = %s, last_activity_ms = %s "
            "WHERE id = 'c'", (seqs[-1], seqs[-1], now),
        )
        values = ",".join(
            f"(1, 'c', {seq}, 'm{seq:025d}', 'message', 1, 'bench', 'b{seq}', 'text', "
            f"'{{\"text\": \"{'x' * 64}\"}}', {now}, 'normal', true, true, true)"
            for seq in seqs
        )
        ids = [row[0] for row in conn.execute(f"INSERT INTO bench_log ({_LOG_COLUMNS}) VALUES {values} RETURNING id")]
        lines = [
            f"1\t{user}\t{seq}\tmessage\tc\t{message_id}\t\\N\t\\N\t{now}\n"
            for user in range(1, members + 1)
            for seq, message_id in zip(range(first_seq, first_seq + COPY_BATCH), ids)
        ]
        with conn.cursor().copy(_MAILBOX_COPY) as copy:
            copy.write("".join(lines).encode())
        conn.execute(
            f"UPDATE bench_head SET mailbox_head = mailbox_head + {COPY_BATCH} WHERE user_id = ANY(%s::bigint[])",
            (member_ids,),
        )
        conn.execute(
            f"UPDATE bench_badge SET badge = badge + {COPY_BATCH}, updated_at_ms = %s WHERE user_id = ANY(%s::bigint[])",
            (now, member_ids),
        )


# Per load process (bench/send_slices.py keeps one for a whole case): the COPY baseline's
# connection, opened by copy_prepare and kept for every slice, closed by copy_check. Each
# slice used to open its own, so each began on a new backend with cold catalog caches.
_CONNECTIONS: dict[str, Any] = {}


def _connection(url: str) -> Any:
    import psycopg

    if url not in _CONNECTIONS:
        _CONNECTIONS[url] = psycopg.connect(url, autocommit=True)
    return _CONNECTIONS[url]


def copy_prepare(url: str, members: int) -> None:
    """The baseline's tables, analysed, before its first slice."""
    _copy_tables(_connection(url), members)


def copy_slice(url: str, members: int, seconds: float, first_message: int) -> dict[str, Any]:
    """Batches of COPY_BATCH messages to `members` users back to back for `seconds` (module
    doc), numbered on from `first_message` (the messages of earlier slices)."""
    conn = _connection(url)
    member_ids = "{" + ",".join(map(str, range(1, members + 1))) + "}"
    messages = 0
    started = time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        # Mailbox seqs follow the message count: every member gets every message.
        _write_batch(conn, first_message + messages + 1, members, member_ids)
        messages += COPY_BATCH
    elapsed = time.monotonic() - started
    return {"messages": messages, "elapsed": elapsed}


def copy_check(url: str, members: int, messages: int) -> None:
    """Every slice's rows are there: messages x members mailbox rows."""
    import psycopg

    with _CONNECTIONS.pop(url, None) or psycopg.connect(url, autocommit=True) as conn:
        written = conn.execute("SELECT count(*) FROM bench_mailbox").fetchone()[0]
    if written != messages * members:
        raise RuntimeError(f"COPY baseline wrote {written} mailbox rows, not {messages * members}")
