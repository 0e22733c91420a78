"""The web client's timeline: history pages back on demand, and presence dots follow the
sender going offline and back online."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.conftest import new_context
from tests.browser.helpers import group_of, log_in, open_conversation, send_as
from tests.conftest import QimDeployment

PAGE = 30  # the client's HISTORY page size
# 35 messages in a row from one script: above the production per-user rate.
WEB_ENV = {"QIM_PER_USER_MSG_RATE": "1000"}


def test_history_pages_back_and_presence_dots_follow_the_sender(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = group_of(alice, bob, title="long")
    send_as(alice, group, "text", *({"text": f"m{n}"} for n in range(PAGE + 5)))
    bob_context, _ = new_context(browser)
    b = bob_context.new_page()
    log_in(b, base, bob)
    expect(b.locator(f".conversation-item[data-id='{group}'] .badge")).to_have_text(str(PAGE + 5))
    open_conversation(b, group)
    texts = b.locator("#messages .message .text")
    expect(texts).to_have_count(PAGE)
    expect(texts.first).to_have_text("m5")
    b.click("#older")
    expect(texts).to_have_count(PAGE + 5)
    expect(texts.first).to_have_text("m0")
    expect(b.locator("#older")).to_be_hidden()

    # Alice is offline (her script device has closed): grey; she opens the web client: green.
    dot = b.locator(f"#messages .message .presence[data-user='{alice.user_id}']").first
    expect(dot).to_have_class("presence offline")
    alice_context, _ = new_context(browser)
    a = alice_context.new_page()
    log_in(a, base, alice)
    expect(dot).to_have_class("presence online")
    alice_context.close()
    expect(dot).to_have_class("presence offline")
    bob_context.close()
