"""An unanswered call in the web client ends as missed when the ring times out (a short
`rtc_ring_timeout_s`): both panels say so and both timelines get the call record."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.helpers import call, call_panel, group_of, open_conversation, signed_in
from tests.conftest import QimDeployment

# Short enough to wait out, long enough that both pages see the ring first.
WEB_ENV = {"QIM_RTC_RING_TIMEOUT_S": "5"}


def test_an_unanswered_call_times_out_as_missed(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = group_of(alice, bob, title="missed")
    with signed_in(browser, base, alice, bob) as (a, b):
        open_conversation(a, group)
        open_conversation(b, group)
        call(a, bob.user_id)
        expect(call_panel(b).locator("button.accept")).to_be_visible()
        # Nobody answers: the server's ring timer ends the call for both.
        expect(call_panel(a)).to_have_attribute("data-state", "missed", timeout=60_000)
        expect(call_panel(b)).to_have_attribute("data-state", "missed", timeout=60_000)
        expect(call_panel(b)).to_contain_text("missed")
        for page in (a, b):
            expect(page.locator("#messages .message .text:has-text('📞')")).to_have_text(
                [f"📞 Call from {alice.user_id} missed"])
