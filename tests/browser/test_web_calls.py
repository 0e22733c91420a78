"""Calls in the web client, between two browser contexts: decline, cancel, accept and hang
up, each outcome on both call panels and one call record per call in both timelines."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import screenshot
from tests.browser.helpers import call, call_panel, group_of, open_conversation, signed_in
from tests.conftest import QimDeployment
from tests.harness.personas import Persona


def test_decline_cancel_accept_and_hang_up_with_call_records(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = group_of(alice, bob, title="calls")
    with signed_in(browser, base, alice, bob) as (a, b):
        check_calls(a, b, alice, bob, group)


def check_calls(a: Page, b: Page, alice: Persona, bob: Persona, group: str) -> None:
    open_conversation(a, group)
    open_conversation(b, group)
    records = "#messages .message .text:has-text('📞')"

    # Declined: Bob sees the ring with its deadline and declines.
    call(a, bob.user_id)
    expect(call_panel(a)).to_contain_text(f"Calling {bob.user_id}")
    expect(call_panel(a)).to_contain_text("rings until")
    expect(call_panel(b)).to_contain_text(f"{alice.user_id} is calling")
    screenshot(b, "call")
    call_panel(b).locator("button.decline").click()
    expect(call_panel(a)).to_have_attribute("data-state", "rejected")
    expect(call_panel(b)).to_have_attribute("data-state", "rejected")
    expect(b.locator(records)).to_have_text([f"📞 Call from {alice.user_id} rejected"])

    # Cancelled by the caller while it rings.
    call(a, bob.user_id)
    expect(call_panel(b)).to_have_attribute("data-state", "ringing")
    call_panel(a).locator("button.cancel").click()
    expect(call_panel(b)).to_have_attribute("data-state", "cancelled")
    expect(call_panel(a)).to_have_attribute("data-state", "cancelled")

    # Accepted, then hung up: completed on both sides.
    call(a, bob.user_id)
    call_panel(b).locator("button.accept").click()
    expect(call_panel(a)).to_have_attribute("data-state", "accepted")
    expect(call_panel(b)).to_contain_text(f"In a call with {alice.user_id}")
    call_panel(a).locator("button.hangup").click()
    expect(call_panel(b)).to_have_attribute("data-state", "completed")
    for page in (a, b):
        expect(page.locator(records)).to_have_count(3)
        expect(page.locator(records).nth(2)).to_contain_text("completed")
