"""A room in the web client survives a server restart: both pages reconnect and rejoin by
themselves, the events the restart lost show as a visible "you missed messages" marker
(replay_truncated, epoch_changed), and live messages flow again after it."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import screenshot
from tests.browser.helpers import signed_in
from tests.conftest import QimDeployment
from tests.harness.personas import api_ok

# Reconnects back off with jitter; the restart itself is a process start on a loaded machine.
RECONNECT_TIMEOUT_MS = 120_000


def join(page: Page, room: str) -> None:
    page.fill("#join-room input[name=room]", room)
    page.click("#join-room button[type=submit]")
    page.wait_for_selector("#room-composer")


def say(page: Page, text: str) -> None:
    page.fill("#room-text", text)
    page.click("#room-composer button[type=submit]")


def test_a_room_survives_a_restart_and_shows_the_truncated_marker(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    room = "lobby"
    api_ok(acme.node, "POST", "rooms", alice.token(), json={"room_id": room, "title": "Lobby"})
    with signed_in(browser, base, alice, bob) as (a, b):
        join(a, room)
        join(b, room)
        say(b, "before the restart")
        expect(a.locator("#room-messages .message .text")).to_have_text(["before the restart"])

        web.node.stop()
        web.node.start()

        marker = a.locator("#room-messages .truncated")
        expect(marker).to_contain_text("You missed messages", timeout=RECONNECT_TIMEOUT_MS)
        expect(b.locator("#room-messages .truncated")).to_be_visible(timeout=RECONNECT_TIMEOUT_MS)
        expect(b.locator("#connection")).to_have_text("online", timeout=RECONNECT_TIMEOUT_MS)
        say(b, "after the restart")
        expect(a.locator("#room-messages .message .text")).to_have_text(["before the restart", "after the restart"])
        # The marker sits between what came before the restart and what came after.
        items = a.locator("#room-messages > li")
        expect(items.nth(1)).to_have_class("truncated")
        screenshot(a, "room")
