"""Group roles, policies and tiers over real HTTP and sockets against an embedded daphne node
(protocol.md §17): every refusal of §17.1's table, owner handover and succession, the
qim.group.v1 events, member paging, the SEND checks of mentions and replies, and an EDIT's
new mentions in its EVENT push."""

from __future__ import annotations

import httpx
import pytest

from qimclient import QimClient, QimError
from tests.core.conversation_helpers import create_group, history_texts, send_text, sync_all
from tests.harness.personas import Persona, TenantHandle, api, api_ok

UNKNOWN = "01NOSUCHCONVERSATION000000"


def patch_member(by: Persona, group: str, user_id: str, body: dict, device_id: str = "phone") -> httpx.Response:
    return api(by.tenant.node, "PATCH", f"conversations/{group}/members/{user_id}", by.token(device_id), json=body)


def set_role(by: Persona, group: str, user_id: str, role: str) -> dict:
    return api_ok(by.tenant.node, "PATCH", f"conversations/{group}/members/{user_id}", by.token(), json={"role": role})


def remove(by: Persona, group: str, user_id: str) -> httpx.Response:
    return api(by.tenant.node, "DELETE", f"conversations/{group}/members/{user_id}", by.token())


def settings(reader: Persona, group: str) -> dict:
    return api_ok(reader.tenant.node, "GET", f"conversations/{group}", reader.token())


def refused(response: httpx.Response, status: int, code: str) -> dict:
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    return response.json()


async def group_events(client: QimClient, group: str) -> list[dict]:
    """The qim.group.v1 controls in the client's mailbox for `group`, oldest first."""
    events, _ = await sync_all(client)
    return [e["control"] for e in events
            if e["conversation_id"] == group and e["kind"] == "control" and e["control"]["custom_type"] == "qim.group.v1"]


async def send_fields(client: QimClient, group: str, text: str, **fields: object) -> dict:
    return await client.request("SEND", conversation_id=group, client_msg_id=f"{group}-{text}",
                                content_type="text", payload={"text": text}, **fields)


async def test_only_the_owner_changes_roles_and_each_change_is_a_group_event(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    refused(patch_member(bob, group, carol.user_id, {"role": "admin"}), 403, "forbidden")

    assert set_role(alice, group, bob.user_id, "admin") == {"user_id": bob.user_id, "role": "admin", "conversation_seq": 1}
    assert set_role(alice, group, bob.user_id, "admin")["conversation_seq"] is None  # held already: nothing written
    refused(patch_member(bob, group, carol.user_id, {"role": "admin"}), 403, "forbidden")  # admins make no admins
    refused(patch_member(alice, group, carol.user_id, {"role": "boss"}), 400, "bad_request")

    c = await carol.connect()
    [control] = await group_events(c, group)
    assert control["payload"] == {"action": "role", "roles": {bob.user_id: "admin"}}
    assert (control["conversation_seq"], control["actor_id"], control["origin_device_id"]) == (1, alice.user_id, "phone")
    assert await history_texts(c, group) == [(1, "qim.group.v1")]  # a timeline row, like a join
    # A tenant admin (no member here) may do what the owner does.
    answer = api_ok(acme.node, "PATCH", f"conversations/{group}/members/{carol.user_id}", acme.admin_token,
                    json={"role": "admin"})
    assert answer["conversation_seq"] == 2
    assert settings(carol, group)["role"] == "admin"


async def test_ownership_is_handed_over_and_never_dropped_directly(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    for role in ("admin", "member"):
        refused(patch_member(alice, group, alice.user_id, {"role": role}), 409, "conflict")
    assert set_role(alice, group, bob.user_id, "owner")["conversation_seq"] == 1
    assert (settings(alice, group)["role"], settings(bob, group)["role"]) == ("admin", "owner")
    refused(patch_member(alice, group, carol.user_id, {"role": "admin"}), 403, "forbidden")  # no longer the owner
    [control] = await group_events(await carol.connect(), group)
    assert control["payload"] == {"action": "role", "roles": {bob.user_id: "owner", alice.user_id: "admin"}}
    members = api_ok(acme.node, "GET", f"conversations/{group}/members", carol.token())["members"]
    assert {m["user_id"]: m["role"] for m in members} == {
        alice.user_id: "admin", bob.user_id: "owner", carol.user_id: "member"}


async def test_removals_follow_the_roles(acme: TenantHandle) -> None:
    alice, bob, carol, dave, erin = (acme.persona(n) for n in ("alice", "bob", "carol", "dave", "erin"))
    group = create_group(alice, bob, carol, dave, erin)
    set_role(alice, group, bob.user_id, "admin")
    set_role(alice, group, carol.user_id, "admin")
    refused(remove(bob, group, alice.user_id), 403, "forbidden")   # an admin removes no owner
    refused(remove(bob, group, carol.user_id), 403, "forbidden")   # nor another admin
    refused(remove(dave, group, erin.user_id), 403, "forbidden")   # a member removes nobody
    assert remove(bob, group, dave.user_id).status_code == 200     # an admin removes members
    assert remove(alice, group, carol.user_id).status_code == 200  # the owner removes admins
    refused(remove(alice, group, dave.user_id), 404, "not_found")  # no longer a member
    assert remove(erin, group, erin.user_id).status_code == 200    # anyone leaves


async def test_an_owner_who_leaves_hands_ownership_to_the_longest_standing_admin(acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group = create_group(alice, bob, carol)
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [dave.user_id]})
    set_role(alice, group, dave.user_id, "admin")   # made admin first, but joined last
    set_role(alice, group, carol.user_id, "admin")
    leave = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{alice.user_id}", alice.token())["conversation_seq"]
    assert settings(carol, group)["role"] == "owner"
    assert (settings(dave, group)["role"], settings(bob, group)["role"]) == ("admin", "member")
    assert settings(alice, group)["member"] is False
    events, _ = await sync_all(await bob.connect())
    tail = [e["control"] for e in events if e["conversation_id"] == group][-2:]
    assert [c["custom_type"] for c in tail] == ["qim.membership.v1", "qim.group.v1"]
    assert tail[0]["payload"] == {"action": "leave", "user_ids": [alice.user_id]}
    assert (tail[1]["conversation_seq"], tail[1]["payload"]) == (
        leave + 1, {"action": "role", "roles": {carol.user_id: "owner"}})


async def test_without_admins_the_longest_standing_member_inherits(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob)
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [carol.user_id]})
    api_ok(acme.node, "DELETE", f"conversations/{group}/members/{alice.user_id}", alice.token())
    assert (settings(bob, group)["role"], settings(carol, group)["role"]) == ("owner", "member")


async def test_add_members_policy_admins_keeps_members_from_adding(acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group = create_group(alice, bob)
    add = {"user_ids": [carol.user_id]}
    assert api_ok(acme.node, "PATCH", f"conversations/{group}", alice.token(),
                  json={"add_members_policy": "admins"})["add_members_policy"] == "admins"
    refused(api(acme.node, "POST", f"conversations/{group}/members", bob.token(), json=add), 403, "forbidden")
    set_role(alice, group, bob.user_id, "admin")
    assert api(acme.node, "POST", f"conversations/{group}/members", bob.token(), json=add).status_code == 201
    refused(api(acme.node, "POST", f"conversations/{group}/members", carol.token(),
                json={"user_ids": [dave.user_id]}), 403, "forbidden")


async def test_at_all_follows_the_mention_all_policy(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    with pytest.raises(QimError) as refusal:
        await send_fields(b, group, "everyone!", mention_all=True)
    assert refusal.value.code == "forbidden"
    assert await history_texts(a, group) == []  # the refused SEND took no seq
    assert (await send_fields(a, group, "all hands", mention_all=True))["conversation_seq"] == 1
    api_ok(acme.node, "PATCH", f"conversations/{group}", alice.token(), json={"mention_all_policy": "members"})
    assert (await send_fields(b, group, "everyone!", mention_all=True))["conversation_seq"] == 3
    [_, update, _] = (await a.request("HISTORY", conversation_id=group))["messages"]
    assert update["content_type"] == "qim.group.v1"
    assert update["payload"] == {"action": "update", "changes": {"mention_all_policy": "members"}}


async def test_renaming_and_setting_policies_are_logged_group_events(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    set_role(alice, group, bob.user_id, "admin")
    body = {"title": "Ops", "mention_all_policy": "members", "add_members_policy": "admins"}
    answer = api_ok(acme.node, "PATCH", f"conversations/{group}", bob.token(), json=body)
    assert answer == {"conversation_id": group, "kind": "group", **body, "member_count": 3, "conversation_seq": 2}
    again = api_ok(acme.node, "PATCH", f"conversations/{group}", bob.token(), json={"title": "Ops"})
    assert again["conversation_seq"] is None
    refused(api(acme.node, "PATCH", f"conversations/{group}", carol.token(), json={"title": "Mine"}), 403, "forbidden")
    refused(api(acme.node, "PATCH", f"conversations/{group}", bob.token(), json={"mention_all_policy": "all"}),
            400, "bad_request")
    refused(api(acme.node, "PATCH", f"conversations/{group}", bob.token(), json={}), 400, "bad_request")
    assert settings(carol, group) == {
        "conversation_id": group, "kind": "group", **body, "member_count": 3,
        "role": "member", "tier": "full", "member": True}
    controls = await group_events(await carol.connect(), group)
    assert [c["payload"] for c in controls] == [
        {"action": "role", "roles": {bob.user_id: "admin"}}, {"action": "update", "changes": body}]
    assert controls[1]["actor_id"] == bob.user_id
    direct = api_ok(acme.node, "POST", "conversations", alice.token(),
                    json={"kind": "direct", "member_user_ids": [bob.user_id]})["conversation_id"]
    refused(api(acme.node, "PATCH", f"conversations/{direct}", alice.token(), json={"title": "x"}), 403, "forbidden")
    refused(patch_member(alice, direct, bob.user_id, {"role": "admin"}), 403, "forbidden")


async def test_other_tenants_conversations_answer_exactly_like_unknown_ids(
    acme: TenantHandle, globex: TenantHandle
) -> None:
    alice, bob, outsider = acme.persona("alice"), acme.persona("bob"), acme.persona("olga")
    gina = globex.persona("gina")
    theirs = create_group(gina, globex.persona("hank"))
    mine = create_group(alice, bob)
    calls = [("GET", "{}", None), ("PATCH", "{}", {"title": "x"}), ("GET", "{}/members", None),
             ("PATCH", "{}/members/" + gina.user_id, {"role": "admin"}),
             ("PATCH", "{}/members/" + alice.user_id, {"tier": "full"}),
             ("DELETE", "{}/members/" + gina.user_id, None)]
    for method, path, body in calls:
        hidden = api(acme.node, method, "conversations/" + path.format(theirs), alice.token(), json=body)
        unknown = api(acme.node, method, "conversations/" + path.format(UNKNOWN), alice.token(), json=body)
        assert (hidden.status_code, hidden.json()) == (unknown.status_code, unknown.json()), (method, path)
        assert hidden.status_code == 404 and hidden.json()["code"] == "not_found"
    # In one's own tenant: naming someone who is no member (or no user) is not_found too.
    refused(patch_member(alice, mine, outsider.user_id, {"role": "admin"}), 404, "not_found")
    refused(patch_member(alice, mine, "nobody-at-all", {"role": "admin"}), 404, "not_found")
    # Someone who never was a member reads nothing of it (as HISTORY answers them).
    refused(api(acme.node, "GET", f"conversations/{mine}", outsider.token()), 403, "forbidden")
    refused(api(acme.node, "GET", f"conversations/{mine}/members", outsider.token()), 403, "forbidden")


async def test_members_are_listed_a_page_at_a_time(acme: TenantHandle) -> None:
    alice, *others = (acme.persona(n) for n in ("alice", "bob", "carol", "dave", "erin"))
    group = create_group(alice, *others)
    api_ok(acme.node, "DELETE", f"conversations/{group}/members/{others[-1].user_id}", others[-1].token())
    seen, after, pages = [], None, 0
    while True:
        query = {"limit": 2, **({"after": after} if after else {})}
        page = api_ok(acme.node, "GET", f"conversations/{group}/members", alice.token(), params=query)
        assert len(page["members"]) <= 2
        seen += page["members"]
        pages += 1
        after = page["next"]
        if after is None:
            break
        assert after == page["members"][-1]["user_id"]
    current = sorted(p.user_id for p in [alice, *others[:-1]])
    assert [m["user_id"] for m in seen] == current and pages == 2
    assert {m["user_id"]: (m["role"], m["display_name"]) for m in seen}[alice.user_id] == ("owner", "Alice")
    # The leaver still reads the list (a former member), clamped limits, a bad limit refused.
    assert len(api_ok(acme.node, "GET", f"conversations/{group}/members", others[-1].token(),
                      params={"limit": 0})["members"]) == 1
    refused(api(acme.node, "GET", f"conversations/{group}/members", alice.token(), params={"limit": "many"}),
            400, "bad_request")


async def test_a_tier_is_each_members_own_choice(acme: TenantHandle) -> None:
    alice, bob, carol, dave = (acme.persona(n) for n in ("alice", "bob", "carol", "dave"))
    group = create_group(alice, bob, carol)
    refused(patch_member(alice, group, bob.user_id, {"tier": "mention_only"}), 403, "forbidden")  # not even the owner
    refused(patch_member(bob, group, bob.user_id, {"tier": "silent"}), 400, "bad_request")
    refused(patch_member(bob, group, bob.user_id, {}), 400, "bad_request")
    assert patch_member(bob, group, bob.user_id, {"tier": "mention_only"}).json() == {
        "user_id": bob.user_id, "tier": "mention_only"}
    assert settings(bob, group)["tier"] == "mention_only" and settings(carol, group)["tier"] == "full"
    b = await bob.connect()
    [item] = [i for i in (await b.request("CONVERSATIONS"))["items"] if i["conversation_id"] == group]
    assert (item["tier"], item["role"], item["mention_count"]) == ("mention_only", "member", 0)
    refused(patch_member(dave, group, dave.user_id, {"tier": "full"}), 403, "forbidden")  # not a member
    refused(patch_member(bob, group, bob.user_id, {"tier": "full", "role": "admin"}), 403, "forbidden")
    assert settings(bob, group)["tier"] == "mention_only"  # the role is the owner's: nothing applies
    refused(patch_member(alice, group, bob.user_id, {"role": "admin", "tier": "full"}), 403, "forbidden")
    assert settings(bob, group)["role"] == "member"  # the tier is bob's: the role did not apply either
    assert await group_events(b, group) == []


async def test_mentions_must_name_current_members_at_most_fifty(acme: TenantHandle) -> None:
    alice, bob, dave = acme.persona("alice"), acme.persona("bob"), acme.persona("dave")
    group = create_group(alice, bob)
    a = await alice.connect()
    with pytest.raises(QimError) as refusal:
        await send_fields(a, group, "hi both", mentions=[bob.user_id, dave.user_id])
    assert refusal.value.code == "bad_request" and dave.user_id in refusal.value.message
    with pytest.raises(QimError) as refusal:
        await send_fields(a, group, "too many", mentions=[f"user-{n}" for n in range(51)])
    assert refusal.value.code == "bad_request" and "50" in refusal.value.message
    ack = await send_fields(a, group, "bob bob bob", mentions=[bob.user_id] * 60)  # duplicates count once
    [message] = (await a.request("HISTORY", conversation_id=group))["messages"]
    assert (message["conversation_seq"], message["mentions"], message["mention_all"]) == (
        ack["conversation_seq"], [bob.user_id], False)


async def test_a_reply_quotes_a_visible_message_as_it_is_now(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob)
    a, b, c = await alice.connect(), await bob.connect(), await carol.connect()
    await send_text(a, group, "lunch?")                                          # seq 1
    reply = await send_fields(b, group, "sure", reply_to=1, mentions=[alice.user_id])  # seq 2
    [_, quoting] = (await a.request("HISTORY", conversation_id=group))["messages"]
    assert (quoting["reply_to"], quoting["mentions"]) == ({
        "conversation_seq": 1, "sender_id": alice.user_id, "content_type": "text",
        "preview": "lunch?", "state": "normal"}, [alice.user_id])
    for missing in (3, 99):  # beyond the head
        with pytest.raises(QimError) as refusal:
            await send_fields(b, group, f"re {missing}", reply_to=missing)
        assert refusal.value.code == "not_found"
    api_ok(acme.node, "POST", f"conversations/{group}/members", alice.token(), json={"user_ids": [carol.user_id]})
    with pytest.raises(QimError) as refusal:  # carol joined at 3: seq 1 is outside her interval
        await send_fields(c, group, "what lunch?", reply_to=1)
    assert refusal.value.code == "not_found"
    recall = await a.request("RECALL", conversation_id=group, conversation_seq=1)
    with pytest.raises(QimError) as refusal:  # the recall event is no timeline row
        await send_fields(b, group, "re the recall", reply_to=recall["event_conversation_seq"])
    assert refusal.value.code == "not_found"
    messages = {m["conversation_seq"]: m for m in (await b.request("HISTORY", conversation_id=group))["messages"]}
    assert messages[reply["conversation_seq"]]["reply_to"] == {
        "conversation_seq": 1, "sender_id": alice.user_id, "content_type": "text",
        "preview": "[recalled]", "state": "recalled"}
    assert "reply_to" not in messages[1]


async def test_an_edits_new_mentions_ride_its_event_push_as_sync_returns_them(acme: TenantHandle) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol)
    a, b = await alice.connect(), await bob.connect()
    sent = await send_fields(a, group, "@bob", mentions=[bob.user_id])
    await b.next_push(timeout=5, type="EVENT")
    await a.request("EDIT", conversation_id=group, conversation_seq=sent["conversation_seq"],
                    payload={"text": "@carol"}, mentions=[carol.user_id])
    pushed = (await b.next_push(timeout=5, type="EVENT"))["event"]
    events, _ = await sync_all(b)
    assert pushed == events[-1]  # §6.5: the EVENT is exactly what SYNC_BATCH returns
    assert (pushed["control"]["mentions"], pushed["control"]["mention_all"]) == ([carol.user_id], False)
