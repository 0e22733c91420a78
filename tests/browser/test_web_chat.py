"""Two people in two browser contexts chat through the web client at /: a group made in the
UI, messages, unread badges that rise and clear, reactions, typing, edit and recall, each
seen live by the other; the screenshots for the README, one at phone width (390 px)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import new_context, screenshot
from tests.browser.helpers import log_in, message, open_conversation
from tests.conftest import QimDeployment


def badge(page: Page, conversation_id: str):  # type: ignore[no-untyped-def]
    return page.locator(f".conversation-item[data-id='{conversation_id}'] .badge")


def expect_status(status: int, request: Callable[[], httpx.Response], timeout: float = 10.0) -> None:
    """The page's logout request is not awaited by the UI: poll until the server says so."""
    deadline = time.monotonic() + timeout
    while (code := request().status_code) != status and time.monotonic() < deadline:
        time.sleep(0.1)
    assert code == status, code


def send(page: Page, text: str) -> None:
    page.fill("#composer-text", text)
    page.click("#composer button[type=submit]")
    expect(page.locator("#messages .message.own .text", has_text=text)).to_be_visible()


def test_two_people_chat_react_edit_and_recall_live(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    alice_context, alice_log = new_context(browser)
    bob_context, bob_log = new_context(browser)
    a, b = alice_context.new_page(), bob_context.new_page()
    a.goto(f"{base}/")
    a.wait_for_selector("#login")
    screenshot(a, "login")
    log_in(a, base, alice)
    log_in(b, base, bob)

    # Alice makes the group in the UI (creation pushes nothing: Bob's list shows it with the
    # first message, below, without a reload).
    a.fill("#new-group input[name=title]", "Lunch")
    a.fill("#new-group input[name=members]", bob.user_id)
    a.click("#new-group button[type=submit]")
    a.wait_for_selector("#conversation h2:text('Lunch')")
    group = a.locator(".conversation-item.selected").get_attribute("data-id")
    assert group

    # Unread rises on Bob's side while the conversation is closed there, then clears.
    send(a, "hello bob")
    send(a, "noon?")
    expect(badge(b, group)).to_have_text("2")
    expect(b.locator(f".conversation-item[data-id='{group}'] .preview")).to_have_text("noon?")
    screenshot(b, "conversation-list")
    open_conversation(b, group)
    expect(b.locator("#messages .message")).to_have_count(2)
    expect(badge(b, group)).to_have_count(0)

    # Typing, then a reply, seen live by Alice.
    b.type("#composer-text", "sure")
    expect(a.locator("#typing")).to_contain_text(bob.user_id)
    b.click("#composer button[type=submit]")
    expect(a.locator("#messages .message:not(.own) .text")).to_have_text("sure")
    expect(a.locator("#typing")).to_have_text("")

    # Reactions: Bob's thumbs-up reaches Alice's count; Alice adds hers; Bob sees 2.
    first = int(a.locator("#messages .message.own").first.get_attribute("data-seq") or 0)
    message(b, first).locator(".reaction[data-key='👍']").click()
    expect(message(a, first).locator(".reaction[data-key='👍'] .count")).to_have_text("1")
    message(a, first).locator(".reaction[data-key='👍']").click()
    expect(message(b, first).locator(".reaction[data-key='👍'] .count")).to_have_text("2")
    message(b, first).locator(".reaction[data-key='👍']").click()
    expect(message(a, first).locator(".reaction[data-key='👍'] .count")).to_have_text("1")
    screenshot(a, "conversation")

    # Edit (its deadline shown) and recall, by Alice, seen by Bob.
    second = first + 1
    expect(message(a, second).locator("button.edit")).to_contain_text("until")
    a.once("dialog", lambda dialog: dialog.accept("twelve thirty?"))
    message(a, second).locator("button.edit").click()
    expect(message(b, second).locator(".text")).to_have_text("twelve thirty?")
    expect(message(b, second).locator(".edited")).to_be_visible()
    message(a, first).locator("button.recall").click()
    expect(message(b, first).locator(".text")).to_have_text("[recalled]")
    expect(message(b, first).locator(".reaction")).to_have_count(0)

    # Phone width: the open conversation takes the whole screen, with a way back.
    b.set_viewport_size({"width": 390, "height": 800})
    expect(b.locator(".sidebar")).to_be_hidden()
    screenshot(b, "conversation-mobile")
    b.click("#conversation .back")
    expect(b.locator(".sidebar")).to_be_visible()

    # Log out revokes the token on the server: a copy kept from the tab no longer works.
    token = json.loads(a.evaluate("() => sessionStorage.getItem('qim.session')"))["token"]
    assert httpx.get(f"{base}/api/v1/registry/types", headers={"Authorization": f"Token {token}"}).status_code == 200
    a.click("#logout")
    a.wait_for_selector("#login")
    expect_status(401, lambda: httpx.get(f"{base}/api/v1/registry/types", headers={"Authorization": f"Token {token}"}))

    assert alice_log.foreign() == [] and bob_log.foreign() == [], (alice_log.foreign(), bob_log.foreign())
    alice_context.close()
    bob_context.close()


def test_a_member_added_in_the_ui_joins_the_group_and_is_heard(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    alice_context, alice_log = new_context(browser)
    carol_context, carol_log = new_context(browser)
    a, c = alice_context.new_page(), carol_context.new_page()
    log_in(a, base, alice)
    a.fill("#new-group input[name=title]", "Plans")
    a.fill("#new-group input[name=members]", bob.user_id)
    a.click("#new-group button[type=submit]")
    a.wait_for_selector("#conversation h2:text('Plans')")
    group = a.locator(".conversation-item.selected").get_attribute("data-id")
    send(a, "who else?")

    # Someone who is not a user is refused in the form; Carol is added.
    a.fill("#add-member", "nobody-at-all")
    a.click("#add-member-form button[type=submit]")
    expect(a.locator("#add-member:invalid")).to_have_count(1)
    a.fill("#add-member", carol.user_id)
    a.click("#add-member-form button[type=submit]")
    expect(a.locator("#add-member")).to_have_value("")

    # Carol finds the group in her list, reads from her join on, and is heard live by Alice.
    log_in(c, base, carol)
    open_conversation(c, group)
    send(c, "me!")
    expect(a.locator("#messages .message:not(.own) .text")).to_have_text("me!")
    expect(c.locator("#messages .message .text", has_text="who else?")).to_have_count(0)

    assert alice_log.foreign() == [] and carol_log.foreign() == [], (alice_log.foreign(), carol_log.foreign())
    alice_context.close()
    carol_context.close()
