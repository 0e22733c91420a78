"""In Chromium, on the embedded node `make run` serves: an operator reads a conversation's
membership intervals, a room's live writer and online count while a member is connected,
and pushes the retry action on a push task; the pages show dates, never raw `*_ms` integers,
and load nothing from beyond 127.0.0.1. Screenshots go to QIM_ADMIN_SHOTS (/tmp), not docs/."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import new_context
from tests.browser.helpers import group_of, send_as
from tests.conftest import QimDeployment, start_embedded
from tests.harness.admin_session import PASSWORD, create_operator
from tests.harness.personas import Persona, api_ok
from tests.rooms.room_helpers import create_room, join

SHOTS = Path(os.environ.get("QIM_ADMIN_SHOTS", "/tmp/qim-admin-shots"))
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC"


@pytest.fixture(scope="module")
def node(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir)
    yield deployment
    deployment.stop()


class RoomMember:
    """A persona connected and joined to a room from a thread of its own (Playwright's sync API
    holds this thread's event loop), until `leave()`."""

    def __init__(self, persona: Persona, room: str) -> None:
        self.joined, self.stop = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._hold(persona, room)), daemon=True)
        self.thread.start()
        assert self.joined.wait(60), "the member never joined"

    async def _hold(self, persona: Persona, room: str) -> None:
        client = await persona.connect()
        await join(client, room)
        self.joined.set()
        while not self.stop.is_set():
            await asyncio.sleep(0.1)
        await client.close()

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(60)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_an_operator_reads_intervals_live_rooms_and_retries_a_push(node: QimDeployment, browser: Browser) -> None:
    acme = node.tenants["acme"]
    operator = create_operator(node.env)
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    api_ok(acme.node, "POST", "devices/phone/push", bob.token("phone"), json={"platform": "ios", "push_token": "t"})
    group = group_of(alice, bob, carol, title="admin tour")
    send_as(alice, group, "text", {"text": "hello"})
    left_at = api_ok(acme.node, "DELETE", f"conversations/{group}/members/{carol.user_id}", carol.token())["conversation_seq"]
    room = create_room(alice)
    member = RoomMember(alice, room)

    context, log = new_context(browser)
    page = context.new_page()
    base = node.node.http_url
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", operator)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")

    page.goto(f"{base}/admin/qim/conversation/{group}/change/")
    table = page.locator("table.qim-intervals")
    # user, role, tier, joined_at, left_at, what they see: the sixth cell
    expect(table.locator(f"tr:has-text('{carol.user_id}') td").nth(5)).to_have_text(f"1 to {left_at - 1} (left at {left_at})")
    expect(table.locator(f"tr:has-text('{bob.user_id}') td").nth(5)).to_have_text("from 1 on (member)")
    expect(page.locator(".field-last_activity .readonly")).to_have_text(re.compile(DATE))
    shot(page, "admin-conversation")

    page.goto(f"{base}/admin/rooms/room/?q={room}")
    row = page.locator("#result_list tbody tr").first
    expect(row.locator("td.field-writer_node")).to_have_text(node.node.node_id)
    expect(row.locator("td.field-online_count")).to_have_text("1")
    shot(page, "admin-rooms")
    member.leave()

    page.goto(f"{base}/admin/qim/pushtask/?q={bob.user_id}&state=pending")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list td.field-created_at")).to_have_text(re.compile(DATE))
    shot(page, "admin-push-tasks")
    page.check("#result_list tbody input.action-select")
    page.select_option("select[name=action]", "retry_selected")
    page.click("button[name=index]")
    expect(page.locator(".messagelist .success")).to_contain_text("0 failed task(s) back to pending")
    shot(page, "admin-push-retry")
    assert log.foreign() == [], log.foreign()
    context.close()
