"""Shared steps of the retention and export tests: age rows, set a tenant's retention, run
the commands and read their JSON lines."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import psycopg

from tests.harness.personas import TenantHandle, api_ok
from tests.harness.qim_process import QimDatabase

DAY_MS = 24 * 3600 * 1000


def execute(db: QimDatabase, sql: str, params: tuple = ()) -> None:
    """A statement that returns no rows (QimDatabase.query fetches them), on either backend."""
    if db.pg is None:
        with sqlite3.connect(db.url.removeprefix("sqlite:///"), timeout=30) as conn:
            conn.execute(sql, params)
        return
    with psycopg.connect(db.pg.url(db.dbname or "postgres")) as conn:
        conn.execute(sql.replace("?", "%s"), params)


def age(db: QimDatabase, conversation_id: str, by_ms: int = 2 * DAY_MS) -> list[int]:
    """Make a conversation's rows so far look `by_ms` older (its log rows and the mailbox
    entries pointing into it), as if written that long ago; answers the aged seqs."""
    execute(db, "UPDATE qim_messagerecord SET sent_at_ms = sent_at_ms - ? WHERE conversation_id = ?", (by_ms, conversation_id))
    execute(db, "UPDATE qim_usermailboxentry SET created_at_ms = created_at_ms - ? WHERE conversation_id = ?",
             (by_ms, conversation_id))
    return log_seqs(db, conversation_id)


def log_seqs(db: QimDatabase, conversation_id: str) -> list[int]:
    rows = db.query("SELECT conversation_seq FROM qim_messagerecord WHERE conversation_id = ? ORDER BY 1", (conversation_id,))
    return [seq for (seq,) in rows]


def mailbox_count(db: QimDatabase, conversation_id: str) -> int:
    return db.count("qim_usermailboxentry", "conversation_id = ?", (conversation_id,))


def set_retention(tenant: TenantHandle, seconds: int) -> dict[str, Any]:
    return api_ok(tenant.node, "PATCH", "tenant/settings", tenant.admin_token, json={"message_retention_s": seconds})


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def last_line(stdout: str) -> dict[str, Any]:
    return json_lines(stdout)[-1]


def by_tenant(stdout: str) -> dict[str, dict[str, Any]]:
    return {line["tenant"]: line for line in json_lines(stdout)}
