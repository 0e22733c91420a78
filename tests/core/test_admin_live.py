"""The admin shows the live system, driven over real HTTP on a two-node cluster (PostgreSQL,
Redis): conversations with their membership intervals, rooms with the cluster's writer node and
online_count, the push outbox's filters and retry action, readable dates and date filters, and
deactivation closing a real socket on the other node and killing its token."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.conftest import QimDeployment, start_cluster
from tests.core.conversation_helpers import create_group, send_text
from tests.core.credential_helpers import frames_until_closed, new_token, open_session, revocation_error, still_open
from tests.harness.admin_session import AdminSession, create_operator
from tests.harness.personas import PASSWORD, Persona, TenantHandle, api, api_ok
from tests.harness.qim_process import last_json_line, manage
from tests.rooms.room_helpers import create_room, join

# Only the revocation notice may close a deactivated user's sockets here, not the re-check.
ENV = {"QIM_TOKEN_RECHECK_S": "3600"}
SENDERS = "tests.harness.push_senders"
RAW_MS = re.compile(r">\s*1\d{12}\s*<")  # an epoch-ms integer shown as a cell's whole text
T = TypeVar("T")


async def polled(probe: Callable[[], T], what: str, timeout: float = 60) -> T:
    """The first truthy answer of `probe`, asked until `timeout` (generous: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not (answer := probe()):
        assert time.monotonic() < deadline, f"no {what} after {timeout} s (last: {answer!r})"
        await asyncio.sleep(0.2)
    return answer


@pytest.fixture(scope="module")
def deployment(postgres, pg_template, redis_proc, work_dir: Path) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def operator(deployment: QimDeployment) -> Iterator[AdminSession]:
    """Logged into node 2: every live answer below has to come from the cluster, not only
    from the process serving the page."""
    session = AdminSession(deployment.nodes[1], create_operator(deployment.env))
    yield session
    session.close()


@pytest.fixture
async def acme(deployment: QimDeployment) -> TenantHandle:  # type: ignore[misc]
    handle = deployment.tenants["acme"]
    yield handle
    await handle.close_clients()


async def test_a_conversation_shows_its_members_and_their_intervals(
    deployment: QimDeployment, acme: TenantHandle, operator: AdminSession
) -> None:
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = create_group(alice, bob, carol, title="intervals")
    client = await alice.connect(deployment.nodes[0])
    await send_text(client, group, "before carol leaves")
    left_at = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{carol.user_id}", carol.token())["conversation_seq"]

    listing = operator.rows(f"/admin/qim/conversation/?q={group}")
    assert "intervals" in listing and ">2</a>" in listing  # two current members, linked to their intervals
    assert "UTC" in listing and not RAW_MS.search(listing)
    detail = operator.page(f"/admin/qim/conversation/{group}/change/")
    for member in (alice, bob):
        # user, role, tier, joined_at, left_at, what they see (issue #34 added role and tier)
        assert re.search(
            rf"<td>{member.user_id}</td><td>\w+</td><td>[^<]*</td><td>0</td><td>-</td><td>from 1 on \(member\)</td>", detail
        ), detail
    assert re.search(
        rf"<td>{carol.user_id}</td><td>member</td><td>[^<]*</td><td>0</td><td>{left_at}</td>"
        rf"<td>1 to {left_at - 1} \(left at {left_at}\)</td>", detail,
    ), detail
    intervals = operator.rows(f"/admin/qim/membershipinterval/?q={group}&member=left")
    assert carol.user_id in intervals and alice.user_id not in intervals

    # Date filters on *_ms fields: the conversation was active within the hour, not 30 days ago.
    assert group in operator.rows(f"/admin/qim/conversation/?q={group}&last_activity_since=1h")
    assert group not in operator.rows(f"/admin/qim/conversation/?q={group}&last_activity_since=older")


def room_row(operator: AdminSession, room: str) -> list[str]:
    """The cells of the room's row in the rooms list."""
    rows = operator.rows(f"/admin/rooms/room/?q={room}")
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", rows, re.S)]


async def test_rooms_show_the_clusters_writer_node_online_count_and_epoch(
    deployment: QimDeployment, acme: TenantHandle, operator: AdminSession
) -> None:
    n1, n2 = deployment.nodes
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room, empty = create_room(alice), create_room(alice)
    await join(await alice.connect(n1), room)  # the writer lives on node 1
    await join(await bob.connect(n1), room)
    info = api_ok(n2, "GET", f"rooms/{room}", alice.token())

    # Node 2 serves the page and holds neither the writer nor any member: all of it is asked.
    # Columns: checkbox, room_id, tenant, title, writer node, online count, room epoch, ...
    cells = await polled(lambda: (c := room_row(operator, room))[5] == "2" and c, "online count of 2")
    assert cells[1:7] == [room, "acme", "lobby", n1.node_id, "2", str(info["room_epoch"])] and info["room_epoch"] >= 1
    assert room_row(operator, empty)[1:7] == [empty, "acme", "lobby", "none (empty)", "0", "0"]
    detail = operator.page(f"/admin/rooms/room/{room_pk(deployment, room)}/change/")
    shown = re.findall(r'field-(writer_node|online_count|live_epoch)">.*?<div class="readonly">(.*?)</div>', detail, re.S)
    assert shown == [("writer_node", n1.node_id), ("online_count", "2"), ("live_epoch", str(info["room_epoch"]))], shown


def room_pk(deployment: QimDeployment, room: str) -> int:
    return deployment.db.query("SELECT id FROM rooms_room WHERE room_id = ?", (room,))[0][0]


def run_worker(deployment: QimDeployment, tmp_path: Path, sender: str, **env: str) -> dict:
    worker_env = {**deployment.env, "QIM_PUSH_SENDER": f"{SENDERS}.{sender}",
                  "QIM_TEST_PUSH_OUTBOX": str(tmp_path / "outbox.jsonl"), **env}
    return last_json_line(manage(worker_env, "qim_push_worker", "--once"))


def task_of(deployment: QimDeployment, persona: Persona) -> tuple[int, str, int]:
    rows = deployment.db.query(
        "SELECT t.id, t.state, t.attempts FROM qim_pushtask t JOIN qim_user u ON u.id = t.user_id "
        "WHERE u.username = ? ORDER BY t.id", (persona.user_id,))
    assert len(rows) == 1, rows
    return rows[0]


async def test_the_push_outbox_filters_by_state_and_retry_requeues_a_failed_task(
    deployment: QimDeployment, acme: TenantHandle, operator: AdminSession, tmp_path: Path
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    api_ok(acme.node, "POST", "devices/phone/push", bob.token("phone"), json={"platform": "ios", "push_token": "t-bob"})
    group = create_group(alice, bob, title="push")
    await send_text(await alice.connect(deployment.nodes[0]), group, "bob is offline")
    mine = "user_id = (SELECT id FROM qim_user WHERE username = ?)"
    await polled(lambda: deployment.db.count("qim_pushtask", mine, (bob.user_id,)), "push task for bob")
    task_id = task_of(deployment, bob)[0]
    # A provider that refuses every try, one attempt allowed: the task fails for good.
    run_worker(deployment, tmp_path, "FlakyFileSender", QIM_TEST_PUSH_FAIL_TIMES="99", QIM_PUSH_MAX_ATTEMPTS="1")
    assert task_of(deployment, bob)[1:] == ("failed", 1)

    search = f"/admin/qim/pushtask/?q={bob.user_id}"
    assert "flaky: attempt 1" in operator.rows(f"{search}&state=failed")
    assert "flaky" not in operator.rows(f"{search}&state=pending")
    assert "flaky" in operator.rows(f"{search}&created_at_since=1h")
    assert "flaky" not in operator.rows(f"{search}&created_at_since=older")
    assert not RAW_MS.search(operator.rows(search))

    page = operator.action("/admin/qim/pushtask/", "retry_selected", [task_id])
    assert "1 failed task(s) back to pending" in page
    assert task_of(deployment, bob)[1:] == ("pending", 0)  # a fresh budget of attempts
    assert "flaky: attempt 1" in operator.rows(f"{search}&state=pending")  # why it failed stays

    assert run_worker(deployment, tmp_path, "JsonlFileSender")["sent"] == 1
    assert task_of(deployment, bob)[1:] == ("sent", 1)
    page = operator.action("/admin/qim/pushtask/", "retry_selected", [task_id])  # never sent twice
    assert "0 failed task(s) back to pending, 0 pending task(s) due now, 1 left as they were" in page
    assert task_of(deployment, bob)[1:] == ("sent", 1)


async def test_deactivating_in_the_admin_closes_a_socket_on_another_node_and_kills_its_token(
    deployment: QimDeployment, acme: TenantHandle, operator: AdminSession
) -> None:
    n1, n2 = deployment.nodes
    alice, bob = acme.persona("alice"), acme.persona("bob")
    token = new_token(alice, "phone", n1)
    socket = await open_session(n1, token, "phone")  # the admin page is served by node 2
    bystander = await open_session(n1, new_token(bob, "phone", n1), "phone")
    user_pk = deployment.db.query("SELECT id FROM qim_user WHERE username = ?", (alice.user_id,))[0][0]

    page = operator.action("/admin/qim/user/", "deactivate_selected", [user_pk])
    assert "1 user(s) deactivated, 1 token(s) revoked." in page
    frames, code = await frames_until_closed(socket)
    assert code == 4403 and revocation_error(frames)["reason"] == "user_deactivated"
    assert await still_open(bystander)
    for node in (n1, n2):
        assert api(node, "GET", "rtc/ice-servers", token).status_code == 401
        refused = api(node, "POST", "auth/token", json={"tenant": "acme", "username": alice.user_id,
                                                       "password": PASSWORD, "device_id": "phone"})
        assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    assert re.search(r"<td class=\"field-is_active\">.*?icon-no", operator.rows(f"/admin/qim/user/?q={alice.user_id}"), re.S)
    await bystander.close()
