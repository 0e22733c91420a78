"""SEND to a group larger than one chunk of the set-based mailbox write (qim/actions/mailbox.py
_CHUNK ids per statement) on PostgreSQL, through a real node and WebSocket clients: every
member gets exactly one mailbox entry per message, at contiguous seqs in conversation order,
and every badge counts what others wrote, on both sides of the chunk boundary.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from qim.actions.mailbox import _CHUNK
from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import send_text, sync_all
from tests.harness.personas import TenantHandle
from tests.harness.qim_process import last_json_line

MEMBERS = _CHUNK + 100
MESSAGES = 3


async def connect(deployment: QimDeployment, token: str) -> QimClient:
    client = QimClient(deployment.node.ws_url, token, "populated", reconnect=False, request_timeout=60.0)
    await client.connect()
    return client


def populate_group(deployment: QimDeployment, tenant: TenantHandle, out: Path) -> tuple[list[str], str]:
    last_json_line(deployment.manage(
        "qim_populate", "--tenant", tenant.name, "--users", str(MEMBERS), "--group", "big",
        "--group-members", str(MEMBERS), "--group-tier", "full", "--tokens-out", str(out), "--device-id", "populated",
    ))
    data = json.loads(out.read_text())
    return list(data["users"].values()), data["group"]


async def test_a_send_to_more_members_than_one_chunk_writes_one_entry_each_on_postgres(
    cluster: QimDeployment, cluster_acme: TenantHandle, tmp_path: Path
) -> None:
    tokens, group = populate_group(cluster, cluster_acme, tmp_path / "tokens.json")
    sender = await connect(cluster, tokens[0])
    # Readers in the first chunk and past it (members are written in user pk order).
    readers = [await connect(cluster, tokens[i]) for i in (1, _CHUNK - 1, MEMBERS - 1)]
    try:
        starts = [(await sync_all(reader))[1] for reader in readers]
        acks = await asyncio.gather(*(send_text(sender, group, f"to all {i}") for i in range(MESSAGES)))
        seqs = sorted(ack["conversation_seq"] for ack in acks)
        assert len(set(seqs)) == MESSAGES

        db = cluster.db
        entries = "SELECT count(*), count(DISTINCT user_id) FROM qim_usermailboxentry WHERE conversation_id = ?"
        assert db.query(entries, (group,))[0] == (MESSAGES * MEMBERS, MEMBERS)
        # Each member's entries are contiguous and end at its head.
        gaps = db.query(
            "SELECT count(*) FROM (SELECT e.user_id, count(*) AS n, min(e.mailbox_seq) AS lo, max(e.mailbox_seq) AS hi "
            "FROM qim_usermailboxentry e WHERE e.conversation_id = ? GROUP BY e.user_id) per "
            "JOIN qim_usermailboxhead h ON h.user_id = per.user_id "
            "WHERE per.n <> ? OR per.hi - per.lo <> ? OR per.hi <> h.mailbox_head",
            (group, MESSAGES, MESSAGES - 1),
        )
        assert gaps == [(0,)]
        badges = db.query(
            "SELECT count(*), sum(b.badge) FROM qim_userbadgestate b JOIN qim_membershipinterval m "
            "ON m.user_id = b.user_id WHERE m.conversation_id = ? AND b.badge = ?", (group, MESSAGES),
        )
        assert badges == [(MEMBERS - 1, MESSAGES * (MEMBERS - 1))]  # everyone but the sender

        for reader, start in zip(readers, starts):
            events, _ = await sync_all(reader, after=start)
            mine = [e for e in events if e["conversation_id"] == group]
            assert [e["message"]["conversation_seq"] for e in mine] == seqs
            assert [e["mailbox_seq"] for e in mine] == list(range(start + 1, start + 1 + MESSAGES))
    finally:
        for client in (sender, *readers):
            await client.close()
