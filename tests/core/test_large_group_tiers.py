"""The mention_only tier in a group whose default it is (design §4.3, issue #34), on two nodes
sharing PostgreSQL and Redis, through real sockets: a SEND writes mailbox entries for its
sender and whom it mentions only; every other member online on either node gets it live
(an EVENT without mailbox_seq), once; the conversation list counts it as unread anyway; a
member who left gets no live push of later messages, on either node."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from qimclient import QimClient
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import send_text, sync_all
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.qim_process import last_json_line

MEMBERS = 6


async def connect(url: str, token: str) -> QimClient:
    client = QimClient(url, token, "populated", reconnect=False, request_timeout=30.0)
    await client.connect()
    return client


def populate(deployment: QimDeployment, tenant: TenantHandle, out: Path) -> tuple[dict[str, str], str]:
    last_json_line(deployment.manage(
        "qim_populate", "--tenant", tenant.name, "--users", str(MEMBERS), "--group", "community",
        "--group-members", str(MEMBERS), "--group-tier", "mention_only", "--tokens-out", str(out),
        "--device-id", "populated",
    ))
    data = json.loads(out.read_text())
    return data["users"], data["group"]


async def pushes_of(client: QimClient, seconds: float = 1.5) -> list[dict]:
    """Every EVENT the client is pushed within `seconds`."""
    got = []
    try:
        while True:
            got.append(await client.next_push(timeout=seconds, type="EVENT"))
    except (asyncio.TimeoutError, TimeoutError):
        return got


def entries(deployment: QimDeployment, group: str) -> int:
    return deployment.db.query("SELECT count(*) FROM qim_usermailboxentry WHERE conversation_id = ?", (group,))[0][0]


async def test_mention_only_members_get_messages_live_and_the_mentioned_in_their_mailbox(
    cluster: QimDeployment, cluster_acme: TenantHandle, tmp_path: Path
) -> None:
    n1, n2 = cluster.nodes
    tokens, group = populate(cluster, cluster_acme, tmp_path / "tokens.json")
    names = list(tokens)
    sender, *others = [
        await connect((n1 if i % 2 == 0 else n2).ws_url, tokens[name]) for i, name in enumerate(names)
    ]
    try:
        before = entries(cluster, group)
        ack = await send_text(sender, group, "to the community")
        assert entries(cluster, group) == before + 1  # the sender's own entry only

        for client in others:  # on both nodes, live, exactly once
            live = [p["event"] for p in await pushes_of(client)]
            assert len(live) == 1, live
            assert live[0]["live"] is True and "mailbox_seq" not in live[0]
            assert live[0]["message"]["message_id"] == ack["message_id"]
        own = [p["event"] for p in await pushes_of(sender)]
        assert [e["message"]["message_id"] for e in own] == [ack["message_id"]] and "mailbox_seq" in own[0]

        reader = others[1]
        events, _ = await sync_all(reader)
        assert [e for e in events if e.get("conversation_id") == group] == []  # not in the mailbox
        listed = {i["conversation_id"]: i for i in (await reader.request("CONVERSATIONS"))["items"]}
        assert (listed[group]["unread"], listed[group]["mention_count"], listed[group]["tier"]) == (1, 0, "mention_only")

        # A mention: the named member's mailbox, once, not live as well.
        named = names[2]
        mention = await sender.request(
            "SEND", conversation_id=group, client_msg_id="mention-1", content_type="text",
            payload={"text": f"@{named} look"}, mentions=[named],
        )
        got = [p["event"] for p in await pushes_of(others[1])]
        assert len(got) == 1 and got[0]["mailbox_seq"] > 0 and "live" not in got[0]
        assert got[0]["message"]["mentions"] == [named]
        assert entries(cluster, group) == before + 3  # sender and the mentioned
        assert [p["event"].get("live") for p in await pushes_of(others[0])] == [True]
        listed = {i["conversation_id"]: i for i in (await others[1].request("CONVERSATIONS"))["items"]}
        assert (listed[group]["unread"], listed[group]["mention_count"]) == (2, 1)
        marked = await others[1].request("MARK_READ", conversation_id=group, read_conversation_seq=mention["conversation_seq"])
        assert marked["unread"] == 0
        listed = {i["conversation_id"]: i for i in (await others[1].request("CONVERSATIONS"))["items"]}
        assert listed[group]["mention_count"] == 0

        # A leaver (on node 2) gets no live push of what follows; the others still do.
        leaver, leaver_name = others[0], names[1]
        api_ok(n1, "DELETE", f"conversations/{group}/members/{leaver_name}", tokens[leaver_name])
        await pushes_of(leaver, 1.0)  # their own leave event, if any
        await pushes_of(others[2], 1.0)
        after = await send_text(sender, group, "after the leave")
        assert await pushes_of(leaver) == []
        assert [p["event"]["message"]["message_id"] for p in await pushes_of(others[2])] == [after["message_id"]]
    finally:
        for client in (sender, *others):
            await client.close()
