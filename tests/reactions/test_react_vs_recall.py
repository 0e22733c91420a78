"""REACT racing a recall's second step on PostgreSQL (open item 11): the REACT batch takes the
message's row lock before it reads its state, so it never re-creates the aggregate of a message
the recall has just emptied.

To make the race happen for sure, the test holds the summary's row lock from another
connection: the recall's second step, which has updated (locked) the message row, waits on it
to delete the summary; the REACTs sent meanwhile then wait on the message row (without the fix
they read `normal`, wait on the summary, find it deleted and create a new one). SQLite needs no
such test: its write transactions are BEGIN IMMEDIATE, so the two cannot interleave.
"""

from __future__ import annotations

import asyncio
import time

from qimclient import QimClient, QimError
from tests.conftest import QimDeployment
from tests.control.control_helpers import history_by_seq, recall
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.batches import counter, lock_held, until_counted
from tests.harness.qim_process import QimDatabase

TIMEOUT = {"request_timeout": 30.0}


async def react(client: QimClient, group: str, seq: int, key: str = "+1") -> dict:
    return await client.request("REACT", conversation_id=group, conversation_seq=seq, reaction_key=key, action="add")


async def until_lock_waiters(db: QimDatabase, expected: int) -> None:
    """Until `expected` backends of the deployment's database wait on a lock (fails after 20 s)."""
    deadline = time.monotonic() + 20
    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = ? AND wait_event_type = 'Lock'"
    while (waiting := (await asyncio.to_thread(db.query, sql, (db.dbname,)))[0][0]) < expected:
        assert time.monotonic() < deadline, f"{waiting} backends wait on a lock, not {expected}"
        await asyncio.sleep(0.05)


def reaction_rows(db: QimDatabase, group: str) -> tuple[int, int]:
    """(summaries, details) of the group's messages."""
    return (
        db.count("reactions_messagereactionsummary", "conversation_id = ?", (group,)),
        db.count("reactions_messagereaction", "conversation_id = ?", (group,)),
    )


async def test_reacts_racing_a_recall_leave_no_aggregate_on_postgres(cluster: QimDeployment) -> None:
    acme, node = cluster.tenants["acme"], cluster.nodes[0]
    try:
        alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
        group = create_group(alice, bob, carol)
        a = await alice.connect(node, **TIMEOUT)
        b, c = await bob.connect(node, **TIMEOUT), await carol.connect(node, **TIMEOUT)
        seq = (await send_text(a, group, "oops"))["conversation_seq"]
        await react(b, group, seq, "seed")                       # the summary and one detail exist
        assert reaction_rows(cluster.db, group) == (1, 1)
        base = counter(node, acme, "react_requests")

        summary_lock = "SELECT id FROM reactions_messagereactionsummary WHERE conversation_id = %s FOR UPDATE"
        with lock_held(cluster.db, summary_lock, (group,)):
            recalled = asyncio.ensure_future(recall(a, group, seq))
            await until_lock_waiters(cluster.db, 1)              # step 2: row updated, waits to delete
            reacts = asyncio.gather(react(b, group, seq), react(c, group, seq, "heart"), return_exceptions=True)
            await until_counted(node, acme, "react_requests", base + 2)
            await until_lock_waiters(cluster.db, 2)              # a REACT batch waits too
        ack = await recalled
        answers = await reacts

        assert ack["type"] == "ACK"
        # The batch waited for the recall's commit on the message row, then read `recalled`.
        assert all(isinstance(x, QimError) and x.code == "not_found" for x in answers), answers
        assert reaction_rows(cluster.db, group) == (0, 0)
        message = (await history_by_seq(a, group))[seq]
        assert message.get("reactions") is None and message["state"] == "recalled", message
        # Nothing stuck: a REACT now is refused at once, and the node still serves REACTs.
        late = await asyncio.gather(react(c, group, seq), return_exceptions=True)
        assert isinstance(late[0], QimError) and late[0].code == "not_found"
        fresh = (await send_text(a, group, "again"))["conversation_seq"]
        assert (await react(b, group, fresh))["counts"] == {"+1": 1}
    finally:
        await acme.close_clients()
