"""`qim_export` (a tenant as JSON lines), and the data-protection pair `qim_user_export` /
`qim_user_erase`, on the embedded setup: complete, secret-free, and walled by tenant."""

from __future__ import annotations

import json
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.core.conversation_helpers import create_group, send_text
from tests.core.credential_helpers import frames_until_closed, new_token, open_session
from tests.core.retention_helpers import last_line
from tests.harness.personas import PASSWORD, TenantHandle, api, api_ok

ENV = {"QIM_PER_USER_MSG_RATE": "1000", "QIM_TOKEN_RECHECK_S": "1"}


@pytest.fixture(scope="module")
def deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


@pytest.fixture
async def acme(deployment: QimDeployment) -> Iterator[TenantHandle]:
    handle = deployment.tenants["acme"]
    yield handle
    await handle.close_clients()


def read_export(path: Path) -> list[dict]:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "tenant" and lines[-1]["type"] == "end"
    assert lines[-1]["counts"] == dict(Counter(line["type"] for line in lines[1:-1]))
    return lines


def of_type(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["type"] == kind]


def assert_no_secrets(text: str, tokens: list[str]) -> None:
    for secret in tokens:
        assert secret not in text
    for marker in ("pbkdf2_", "argon2", "password", "push_token", "digest"):
        assert marker not in text


async def test_a_tenant_export_holds_its_users_conversations_memberships_and_messages_only(
    deployment: QimDeployment, acme: TenantHandle, tmp_path: Path
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob, title="export me")
    a = await alice.connect()
    sent = [await send_text(a, group, f"hello {i} ✓") for i in range(5)]
    globex = deployment.tenants["globex"]
    api_ok(globex.node, "POST", "users", globex.admin_token, json={"username": "outsider", "password": "pw"})
    out = tmp_path / "acme.jsonl"

    report = last_line(deployment.manage("qim_export", "--tenant", "acme", "--out", str(out)))
    lines = read_export(out)

    assert report["counts"] == lines[-1]["counts"] and lines[0]["tenant"] == "acme"
    users = {u["user_id"] for u in of_type(lines, "user")}
    assert {alice.user_id, bob.user_id, "admin"} <= users and "outsider" not in users
    conversation = next(c for c in of_type(lines, "conversation") if c["conversation_id"] == group)
    assert conversation["title"] == "export me" and conversation["kind"] == "group"
    members = {m["user_id"] for m in of_type(lines, "membership") if m["conversation_id"] == group}
    assert members == {alice.user_id, bob.user_id}
    messages = [m for m in of_type(lines, "message") if m["conversation_id"] == group]
    assert [(m["conversation_seq"], m["payload"]) for m in messages if m["content_type"] == "text"] == [
        (ack["conversation_seq"], {"text": f"hello {i} ✓"}) for i, ack in enumerate(sent)
    ]
    assert all(m["sender_id"] == alice.user_id for m in messages if m["content_type"] == "text")
    assert {d["device_id"] for d in of_type(lines, "device") if d["user_id"] == alice.user_id} == {"phone"}
    assert_no_secrets(out.read_text(), [alice.token(), acme.admin_token])


async def test_a_user_export_holds_what_they_sent_and_where_they_are(
    deployment: QimDeployment, acme: TenantHandle, tmp_path: Path
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    await send_text(a, group, "mine")
    await send_text(b, group, "bob's own")
    out = tmp_path / "alice.jsonl"

    report = last_line(deployment.manage("qim_user_export", "--tenant", "acme", "--user", alice.user_id, "--out", str(out)))
    lines = read_export(out)

    assert report["user_id"] == alice.user_id
    assert [u["user_id"] for u in of_type(lines, "user")] == [alice.user_id]
    assert [m["payload"] for m in of_type(lines, "message")] == [{"text": "mine"}]
    assert [c["conversation_id"] for c in of_type(lines, "conversation")] == [group]
    assert [(m["conversation_id"], m["user_id"]) for m in of_type(lines, "membership")] == [(group, alice.user_id)]
    assert_no_secrets(out.read_text(), [alice.token(), bob.token()])
    with pytest.raises(RuntimeError, match="no user"):
        deployment.manage("qim_user_export", "--tenant", "globex", "--user", alice.user_id, "--out", str(out))


async def test_erasure_tombstones_what_they_sent_and_touches_no_one_else(
    deployment: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(), await bob.connect()
    mine = await send_text(a, group, "erase me")
    kept = await send_text(b, group, "bob stays")
    await a.request("EDIT", conversation_id=group, conversation_seq=mine["conversation_seq"], payload={"text": "edited secret"})
    globex = deployment.tenants["globex"]
    api_ok(globex.node, "POST", "users", globex.admin_token, json={"username": alice.user_id, "password": PASSWORD})
    ws = await open_session(acme.node, new_token(alice, "laptop"), "laptop")

    with pytest.raises(RuntimeError, match="--yes"):
        deployment.manage("qim_user_erase", "--tenant", "acme", "--user", alice.user_id)
    done = last_line(deployment.manage("qim_user_erase", "--tenant", "acme", "--user", alice.user_id, "--yes"))

    assert done["erased_user_id"] == alice.user_id and done["messages_tombstoned"] == 1
    _, code = await frames_until_closed(ws)
    assert code == 4403
    history = await b.request("HISTORY", conversation_id=group)
    rows = {m["conversation_seq"]: m for m in history["messages"]}
    gone = rows[mine["conversation_seq"]]
    assert gone["state"] == "deleted" and gone["payload"] is None and gone["sender_id"].startswith("erased-")
    assert rows[kept["conversation_seq"]]["payload"] == {"text": "bob stays"}
    assert deployment.db.count("qim_messagerecord", "payload LIKE ?", ("%secret%",)) == 0
    login = {"tenant": "acme", "username": alice.user_id, "password": PASSWORD, "device_id": "phone"}
    assert api(acme.node, "POST", "auth/token", json=login).status_code == 401
    assert api(globex.node, "POST", "auth/token", json={**login, "tenant": "globex"}).status_code == 200
    assert deployment.db.count(
        "qim_device", "user_id IN (SELECT id FROM qim_user WHERE tenant_id = (SELECT id FROM qim_tenant WHERE name = 'acme') AND username LIKE 'erased-%')"
    ) == 0


async def test_a_tenant_admin_exports_and_erases_a_user_over_rest(deployment: QimDeployment, acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect()
    mine = await send_text(a, group, "over rest")
    globex = deployment.tenants["globex"]

    exported = api(acme.node, "GET", f"users/{alice.user_id}/export", acme.admin_token)
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [m["payload"] for m in of_type(lines, "message")] == [{"text": "over rest"}]
    assert_no_secrets(exported.text, [alice.token(), acme.admin_token])

    # Walls and roles: another tenant's admin, a plain user, oneself.
    for path in (f"users/{alice.user_id}/export", f"users/{alice.user_id}/erase"):
        method = "GET" if path.endswith("export") else "POST"
        outsider = api(globex.node, method, path, globex.admin_token)
        assert (outsider.status_code, outsider.json()["code"]) == (404, "not_found")
        plain = api(acme.node, method, path, bob.token())
        assert (plain.status_code, plain.json()["code"]) == (403, "forbidden")
    assert api(acme.node, "GET", "users/nosuch/export", acme.admin_token).json()["code"] == "not_found"
    myself = api(acme.node, "POST", "users/admin/erase", acme.admin_token)
    assert (myself.status_code, myself.json()["code"]) == (409, "conflict")

    erased = api_ok(acme.node, "POST", f"users/{alice.user_id}/erase", acme.admin_token)
    assert erased["erased_user_id"] == alice.user_id and erased["messages_tombstoned"] == 1
    history = await (await bob.connect()).request("HISTORY", conversation_id=group)
    row = next(m for m in history["messages"] if m["conversation_seq"] == mine["conversation_seq"])
    assert row["state"] == "deleted" and row["payload"] is None
    assert api(acme.node, "POST", f"users/{alice.user_id}/erase", acme.admin_token).status_code == 404
