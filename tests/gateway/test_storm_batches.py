"""What a reconnect storm sends at once, answered as if alone: SYNCs read together
(qim/queries/mailbox.py sync_pages: one query for many users' mailboxes) and ROOM_JOINs whose
room lookups run together (rooms/access.py), on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import QimDeployment
from tests.core.credential_helpers import open_session, reply
from tests.harness.personas import api_ok

MESSAGES = 12


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Iterator[QimDeployment]:
    yield request.getfixturevalue(request.param)


async def sessions(deployment: QimDeployment, tenant: str, names: list[str]) -> dict[str, Any]:
    """A persona per name (several devices of one persona: "bob/phone", "bob/laptop"), each
    device with a socket past AUTH on the first node."""
    handle = deployment.tenants[tenant]
    personas: dict[str, Any] = {}
    out = {}
    for name in names:
        user, _, device = name.partition("/")
        persona = personas.setdefault(user, handle.persona(user))
        out[name] = (persona, await open_session(handle.node, persona.token(device or "phone"), device or "phone"))
    return out


def seqs(page: dict[str, Any]) -> list[int]:
    return [e["mailbox_seq"] for e in page["events"]]


async def test_a_burst_of_syncs_answers_each_as_alone(deployment: QimDeployment) -> None:
    devices = await sessions(deployment, "acme", ["alice", "bob/phone", "bob/laptop", "carol", "dave", "erin"])
    alice, alice_ws = devices["alice"]
    members = [devices[n][0].user_id for n in ("bob/phone", "carol", "erin")]
    group = api_ok(deployment.node, "POST", "conversations", alice.token(),
                   json={"kind": "group", "member_user_ids": members})["conversation_id"]
    for n in range(MESSAGES):
        ack = await reply(alice_ws, {"type": "SEND", "req_id": f"m{n}", "conversation_id": group, "client_msg_id": f"m{n}",
                                     "content_type": "text", "payload": {"text": f"hello {n}"}})
        assert ack["type"] == "ACK", ack
    # Erin's entries gone, as retention deletes them: her empty pages read her head in the burst.
    deployment.db.query("DELETE FROM qim_usermailboxentry WHERE user_id IN (SELECT id FROM qim_user WHERE username = ?) "
                        "RETURNING mailbox_seq", (devices["erin"][0].user_id,))
    # (device, cursor, limit): one user's two devices in one burst, small pages, an empty mailbox,
    # the sender's own device, a cursor at the head, an emptied mailbox from before and at its head.
    asks = [("bob/phone", 0, 5), ("bob/laptop", 3, None), ("carol", 0, None), ("carol", 10, 1),
            ("dave", 0, None), ("alice", 0, None), ("bob/phone", MESSAGES, None), ("erin", 0, None),
            ("erin", MESSAGES, None)]
    sockets = {name: ws for name, (_, ws) in devices.items()}

    def frame(i: int, cursor: int, limit: int | None) -> dict[str, Any]:
        return {"type": "SYNC", "req_id": f"s{i}", "after_mailbox_seq": cursor, **({"limit": limit} if limit else {})}

    # Several sockets per device so that every ask is in flight at once.
    extra = {name: [await open_session(deployment.node, devices[name][0].token(name.partition("/")[2] or "phone"),
                                       name.partition("/")[2] or "phone") for _ in asks] for name in sockets}
    burst = await asyncio.gather(*(reply(extra[name][i], frame(i, cursor, limit)) for i, (name, cursor, limit) in enumerate(asks)))
    alone = [await reply(sockets[name], frame(i, cursor, limit)) for i, (name, cursor, limit) in enumerate(asks)]
    assert burst == alone
    assert [seqs(p) for p in burst] == [[1, 2, 3, 4, 5], list(range(4, MESSAGES + 1)), list(range(1, MESSAGES + 1)),
                                         [11], [], list(range(1, MESSAGES + 1)), [], [], []]
    assert [(p["next_mailbox_seq"], p["has_more"]) for p in burst] == [
        (5, True), (MESSAGES, False), (MESSAGES, False), (11, True), (0, False), (MESSAGES, False), (MESSAGES, False),
        (0, False), (MESSAGES, False)]
    assert [p.get("history_truncated", False) for p in burst] == [False] * 7 + [True, False]
    texts = [e["message"]["payload"]["text"] for e in burst[2]["events"]]
    assert texts == [f"hello {n}" for n in range(MESSAGES)]
    for ws in [*sockets.values(), *(w for ws in extra.values() for w in ws)]:
        await ws.close()


async def test_a_burst_of_room_joins_finds_exactly_the_tenants_rooms(deployment: QimDeployment) -> None:
    devices = await sessions(deployment, "acme", ["erin", "frank"])
    (erin, _), (frank, _) = devices["erin"], devices["frank"]
    globex = await sessions(deployment, "globex", ["gina"])
    gina, _ = globex["gina"]
    api_ok(deployment.node, "POST", "rooms", erin.token(), json={"room_id": "storm-a"})
    api_ok(deployment.node, "POST", "rooms", erin.token(), json={"room_id": "storm-b"})
    api_ok(deployment.node, "POST", "rooms", gina.token(), json={"room_id": "storm-globex"})
    asks = [(frank, "storm-a"), (frank, "storm-b"), (frank, "storm-globex"), (frank, "storm-nowhere"),
            (erin, "storm-a"), (gina, "storm-globex"), (gina, "storm-a")] * 3
    node = deployment.node
    sockets = [await open_session(node, persona.token("phone"), "phone") for persona, _ in asks]
    answers = await asyncio.gather(*(reply(ws, {"type": "ROOM_JOIN", "req_id": f"j{i}", "room_id": room})
                                     for i, (ws, (_, room)) in enumerate(zip(sockets, asks))))
    found = ["ROOM_BATCH", "ROOM_BATCH", "not_found", "not_found", "ROOM_BATCH", "ROOM_BATCH", "not_found"] * 3
    assert [a.get("code") or a["type"] for a in answers] == found
    # Another tenant's room answers exactly like one that does not exist, its id aside.
    missing = {re.sub(r"'[^']*'", "'X'", a["message"]) for a in answers if a["type"] == "ERROR"}
    assert missing == {"no room 'X'"}
    for ws in [*sockets, devices["erin"][1], devices["frank"][1], globex["gina"][1]]:
        await ws.close()
