"""qimclient and groups (protocol.md §17) against a real embedded node: mentions and replies
through SEND, SYNC and HISTORY, mention_count cleared by MARK_READ and moved by EDIT, live
events of a mention_only member, role changes reaching another device by SYNC, the REST
helpers and the command line; the pump's handling of live events against a scripted session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from qimclient import ApiError, MailboxSync, MemoryCursorStore, QimClient, RestClient
from qimclient.cli_text import event_line
from tests.client.test_sdk_sync import ScriptedSession, assert_no_more_events, event, sdk_client, take_texts
from tests.core.conversation_helpers import sync_all
from tests.harness.personas import Persona, TenantHandle


async def new_group(owner: Persona, *members: Persona, title: str = "team") -> str:
    async with RestClient(owner.tenant.node.http_url, owner.token()) as api:
        return await api.create_group(title, [m.user_id for m in members])


async def item_of(client: QimClient, conversation_id: str) -> dict:
    listing = await client.conversations()
    return next(i for i in listing["items"] if i["conversation_id"] == conversation_id)


async def test_a_reply_with_mentions_round_trips_through_events_sync_and_history(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = await new_group(alice, bob, carol)
    a, b = await sdk_client(alice), await sdk_client(bob)
    first = await a.send_text(group, "lunch?")
    reply = await b.send_text(group, "@alice sure", mentions=[alice.user_id], reply_to=first["conversation_seq"])
    quote = {"conversation_seq": first["conversation_seq"], "sender_id": alice.user_id, "content_type": "text",
             "preview": "lunch?", "state": "normal"}

    live = (await take_texts(a, 2))[-1]["message"]          # EVENT pushes
    c = await sdk_client(carol)                             # SYNC from 0
    await c.wait_synced(timeout=5)
    synced = c.drain_events()[-1]["message"]
    [_, history] = await c.history(group)                   # HISTORY
    for message in (live, synced, history):
        assert message["conversation_seq"] == reply["conversation_seq"]
        assert (message["mentions"], message["mention_all"], message["reply_to"]) == ([alice.user_id], False, quote)
        assert message["render"]["text"] == "@alice sure"
    plain = (await c.history(group))[0]
    assert (plain["mentions"], plain["mention_all"], "reply_to" in plain) == ([], False, False)


async def test_mention_count_is_cleared_by_mark_read_and_follows_an_edit(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = await new_group(alice, bob, carol)
    a, b = await sdk_client(alice, sync=False), await sdk_client(bob)
    await a.send_text(group, "hi all")                                          # 1
    await a.send_text(group, "@bob look", mentions=[bob.user_id])                # 2
    await a.send_text(group, "standup", mention_all=True)                        # 3: the owner may @all
    await a.send_text(group, "later")                                            # 4
    item = await item_of(b, group)
    assert (item["unread"], item["mention_count"], item["role"], item["tier"]) == (4, 2, "member", "full")
    assert (await b.mark_read(group, 2))["unread"] == 2
    assert (await item_of(b, group))["mention_count"] == 1
    assert (await b.mark_read(group, 4))["unread"] == 0
    assert (await item_of(b, group))["mention_count"] == 0

    both = await a.send_text(group, "@bob @carol", mentions=[bob.user_id, carol.user_id])
    assert (await item_of(b, group))["mention_count"] == 1
    await b.wait_synced(timeout=5)
    b.drain_events()
    edit = await a.edit_text(group, both["conversation_seq"], "@carol only", mentions=[carol.user_id])
    assert (await item_of(b, group))["mention_count"] == 0   # the dropped mention no longer counts
    edited = await b.next_event(timeout=5)
    assert edited["control"]["custom_type"] == "qim.edit.v1"
    assert edited["control"]["conversation_seq"] == edit["event_conversation_seq"]
    assert (edited["control"]["mentions"], edited["control"]["mention_all"]) == ([carol.user_id], False)
    [message] = await b.history(group, after_seq=both["conversation_seq"] - 1)
    assert (message["mentions"], message["state"]) == ([carol.user_id], "edited")


async def test_a_mention_only_member_gets_live_events_that_leave_the_cursor_alone(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = await new_group(alice, bob)
    async with RestClient(acme.node.http_url, bob.token()) as api:
        assert await api.set_tier(group, bob.user_id, "mention_only") == {"user_id": bob.user_id, "tier": "mention_only"}
    a = await sdk_client(alice, sync=False)
    b = await sdk_client(bob)
    assert b.mailbox is not None
    await b.wait_synced(timeout=5)
    cursor, gap_fills = b.cursor, b.mailbox.gap_fills
    seen: list[dict] = []
    b.on_event(seen.append)

    await a.send_text(group, "chatter")
    live = await b.next_event(timeout=5)
    assert live["live"] is True and "mailbox_seq" not in live and live["conversation_id"] == group
    assert live["message"]["payload"] == {"text": "chatter"} and live["message"]["render"]["text"] == "chatter"
    await b.wait_synced(timeout=5)
    assert (b.cursor, b.mailbox.live_events, b.mailbox.gap_fills) == (cursor, 1, gap_fills)

    mention = await a.send_text(group, "@bob", mentions=[bob.user_id])
    entry = await b.next_event(timeout=5)     # a mention is a mailbox entry: right after the cursor
    assert (entry["mailbox_seq"], entry["message"]["conversation_seq"]) == (cursor + 1, mention["conversation_seq"])
    assert b.cursor == cursor + 1 and b.mailbox.gap_fills == gap_fills
    assert seen == [live, entry]
    await assert_no_more_events(b)
    events, _ = await sync_all(await bob.connect(device_id="tablet"))  # the mailbox has only the mention
    assert [e["message"]["conversation_seq"] for e in events if e["conversation_id"] == group] == [
        mention["conversation_seq"]]


async def test_a_role_change_by_the_owner_reaches_another_members_device_by_sync(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = await new_group(alice, bob, carol)
    store = MemoryCursorStore()
    c = await sdk_client(carol, cursor_store=store)
    await c.wait_synced(timeout=5)
    await c.close()                                         # carol's phone goes offline
    async with RestClient(acme.node.http_url, alice.token()) as api:
        changed = await api.set_member_role(group, bob.user_id, "admin")
    assert changed == {"user_id": bob.user_id, "role": "admin", "conversation_seq": 1}
    again = await sdk_client(carol, cursor_store=store)     # back: SYNC from the stored cursor
    await again.wait_synced(timeout=5)
    [synced] = again.drain_events()
    assert synced["kind"] == "control" and synced["conversation_id"] == group
    control = synced["control"]
    assert (control["custom_type"], control["conversation_seq"], control["actor_id"]) == (
        "qim.group.v1", 1, alice.user_id)
    assert control["payload"] == {"action": "role", "roles": {bob.user_id: "admin"}}
    assert (await item_of(again, group))["role"] == "member"


async def test_the_rest_helpers_run_a_group(acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    async with RestClient(acme.node.http_url, alice.token()) as api:
        group = await api.create_group("helpers", [bob.user_id, carol.user_id, dave.user_id])
        assert await api.get_conversation(group) == {
            "conversation_id": group, "kind": "group", "title": "helpers", "mention_all_policy": "admins",
            "add_members_policy": "members", "member_count": 4, "role": "owner", "tier": "full", "member": True}
        updated = await api.update_conversation(group, title="Ops", add_members_policy="admins")
        assert (updated["title"], updated["add_members_policy"], updated["conversation_seq"]) == ("Ops", "admins", 1)
        with pytest.raises(ValueError):
            await api.update_conversation(group)
        members = await api.list_members(group, page_size=1)   # four pages, joined
        assert [m["user_id"] for m in members] == sorted(p.user_id for p in (alice, bob, carol, dave))
        assert {m["user_id"]: m["role"] for m in members}[alice.user_id] == "owner"
        assert (await api.set_member_role(group, bob.user_id, "admin"))["conversation_seq"] == 2
        with pytest.raises(ApiError) as refused:
            await api.set_tier(group, bob.user_id, "mention_only")   # only bob chooses bob's tier
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
    async with RestClient(acme.node.http_url, bob.token()) as api:
        assert (await api.set_tier(group, bob.user_id, "mention_only"))["tier"] == "mention_only"
        assert await api.remove_member(group, dave.user_id) == 3     # an admin removes a member
        with pytest.raises(ApiError) as refused:
            await api.remove_member(group, alice.user_id)             # but not the owner
        assert refused.value.code == "forbidden"
        assert [m["user_id"] for m in await api.list_members(group)] == sorted(
            p.user_id for p in (alice, bob, carol))
        assert (await api.get_conversation(group))["tier"] == "mention_only"


def run_cli(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "qimclient", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


async def test_the_command_line_sends_mentions_and_replies_and_runs_a_group(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = await new_group(alice, bob)
    a = await sdk_client(alice, sync=False)
    first = await a.send_text(group, "lunch?")
    session = ["--url", acme.node.http_url, "--token", bob.token("cli"), "--device-id", "cli"]
    [ack] = await asyncio.to_thread(
        run_cli, "send", *session, "--conversation", group, "--text", "@alice sure",
        "--mention", alice.user_id, "--reply-to", str(first["conversation_seq"]))
    seq = json.loads(ack)["conversation_seq"]
    [edited] = await asyncio.to_thread(
        run_cli, "edit", *session, "--conversation", group, "--seq", str(seq), "--text", "sure", "--no-mentions")
    assert json.loads(edited)["event_conversation_seq"] == seq + 1
    [_, reply] = await a.history(group)
    assert (reply["reply_to"]["conversation_seq"], reply["mentions"], reply["payload"]) == (1, [], {"text": "sure"})

    rest = ["--url", acme.node.http_url, "--token", alice.token(), "--conversation", group]
    [role] = await asyncio.to_thread(run_cli, "group", *rest, "role", bob.user_id, "admin")
    assert json.loads(role)["role"] == "admin"
    lines = await asyncio.to_thread(run_cli, "group", *rest, "members", "--page-size", "1")
    assert [json.loads(line)["role"] for line in lines] == [
        "owner" if p is alice else "admin" for p in sorted((alice, bob), key=lambda p: p.user_id)]
    [shown] = await asyncio.to_thread(run_cli, "group", *rest, "update", "--title", "Lunch")
    assert json.loads(shown)["title"] == "Lunch"


def test_tail_text_lines_spell_out_mentions_replies_and_live_events() -> None:
    message = {
        "conversation_seq": 5, "sender_id": "bob", "content_type": "text", "payload": {"text": "@alice sure"},
        "preview": "@alice sure", "render": {"mode": "native", "text": "@alice sure"},
        "mentions": ["alice"], "mention_all": False,
        "reply_to": {"conversation_seq": 3, "sender_id": "alice", "content_type": "text",
                     "preview": "lunch?", "state": "normal"},
    }
    stored = {"mailbox_seq": 12, "kind": "message", "conversation_id": "c1", "message": message}
    assert event_line(stored, "alice") == '#12 c1 #5 bob (re #3 alice: "lunch?"): @alice sure [@alice] <- mentions you'
    assert event_line(stored, "carol") == '#12 c1 #5 bob (re #3 alice: "lunch?"): @alice sure [@alice]'
    recalled = {**message, "mentions": [], "mention_all": True, "render": None, "preview": "standup",
                "reply_to": {**message["reply_to"], "preview": "[recalled]", "state": "recalled"}}
    live = {"kind": "message", "conversation_id": "c1", "live": True, "message": recalled}
    assert event_line(live, "carol") == 'live c1 #5 bob (re #3 alice: "[recalled]"): standup [@all] <- mentions you'
    control = {"mailbox_seq": 13, "kind": "control", "conversation_id": "c1", "control": {
        "custom_type": "qim.group.v1", "conversation_seq": 6, "actor_id": "alice",
        "payload": {"action": "role", "roles": {"bob": "admin"}}}}
    assert event_line(control) == '#13 c1 #6 alice qim.group.v1 {"action":"role","roles":{"bob":"admin"}}'


# The pump alone, against a scripted session.


async def test_live_events_are_handed_on_in_their_turn_without_moving_the_cursor() -> None:
    session = ScriptedSession([event(1), event(2)])
    sync = MailboxSync(session)  # type: ignore[arg-type]
    handed: list[dict] = []
    sync.on_event(handed.append)
    sync.start()
    try:
        await sync.wait_synced(timeout=2)
        live = {"kind": "message", "conversation_id": "c1", "live": True, "message": {"conversation_seq": 9}}
        session.events.append(event(3))
        for pushed in (live, event(3), {**live, "message": {"conversation_seq": 10}}):
            sync.offer(pushed)
        sync.offer({"kind": "message", "live": "yes"})                    # neither a seq nor live: true
        sync.offer({"mailbox_seq": 4, "kind": "message", "live": True})   # a seq decides: a mailbox event
        await sync.wait_synced(timeout=2)
        assert [e.get("mailbox_seq", "live") for e in handed] == [1, 2, "live", 3, "live", 4]
        assert [e.get("mailbox_seq", "live") for e in sync.drain_events()] == [1, 2, "live", 3, "live", 4]
        assert (sync.cursor, sync.live_events, sync.invalid_events, sync.gap_fills) == (4, 2, 1, 0)
    finally:
        await sync.stop()
