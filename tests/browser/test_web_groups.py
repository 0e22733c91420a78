"""Groups in the web client (protocol §17), in two browsers: an @mention picked from the
composer's autocomplete, highlighted for the one it names and counted on their list; a reply
with its quote; the owner making a member an admin in the member panel, seen live by them;
a member who switches to "only @mentions" still seeing new messages live while the
conversation is open. Screenshots: mentions.png, mention-autocomplete.png, reply-mobile.png,
members.png, groups-mobile.png."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import screenshot
from tests.browser.helpers import group_of, message, open_conversation, send_as, signed_in
from tests.conftest import QimDeployment
from tests.harness.personas import api_ok


def item(page: Page, conversation_id: str):  # type: ignore[no-untyped-def]
    return page.locator(f".conversation-item[data-id='{conversation_id}']")


def sent(page: Page, text: str) -> int:
    """The seq of my newest message with this text, once it is in my timeline."""
    row = page.locator("#messages .message.own", has_text=text).last
    expect(row).to_be_visible()
    return int(row.get_attribute("data-seq") or 0)


def test_a_mention_picked_in_the_composer_is_highlighted_and_counted_and_a_reply_quotes(
    web: QimDeployment, browser: Browser
) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group = group_of(alice, bob, carol, title="Standup")
    # Another group where Alice already named Bob: its badges stay on his list for the screenshot.
    release = group_of(alice, bob, title="Release")
    send_as(alice, release, "text", {"text": f"@{bob.user_id} ship it?"}, mentions=[bob.user_id])
    send_as(alice, release, "text", {"text": "or wait for the fix?"})
    with signed_in(browser, base, alice, bob) as (a, b):
        expect(item(b, release).locator(".mention-badge")).to_have_text("@1")
        expect(item(b, release).locator(".badge")).to_have_text("2")
        open_conversation(a, group)

        # "@" and the start of Bob's id offer Bob (not Alice herself); Enter inserts "@bob-N ".
        # Alice is the owner, so "@all" is offered too (the default policy: owner and admins).
        a.click("#composer-text")
        a.keyboard.type("@")
        options = a.locator("#mention-options .mention-option")
        expect(options.first).to_be_visible()
        expect(a.locator("#mention-options [data-user='all']")).to_have_count(1)
        expect(a.locator(f"#mention-options [data-user='{alice.user_id}']")).to_have_count(0)
        a.keyboard.type(bob.user_id[:3])
        expect(options).to_have_count(1)
        expect(options.first).to_have_attribute("data-user", bob.user_id)
        expect(a.locator("#composer-text")).to_have_attribute("aria-expanded", "true")
        a.keyboard.press("Enter")
        expect(a.locator("#mention-options")).to_be_hidden()
        expect(a.locator("#composer-text")).to_have_value(f"@{bob.user_id} ")
        a.keyboard.type("can you review the deploy?")
        a.keyboard.press("Enter")
        seq = sent(a, "can you review the deploy?")
        expect(message(a, seq).locator(".mention")).to_have_text(f"@{bob.user_id}")

        # Bob: a mention badge beside the unread count; opened, his mention stands out.
        expect(item(b, group).locator(".mention-badge")).to_have_text("@1")
        expect(item(b, group).locator(".badge")).to_have_text("1")
        open_conversation(b, group)
        expect(message(b, seq)).to_have_class("message mentions-me")
        expect(message(b, seq).locator(".mention.me")).to_have_text(f"@{bob.user_id}")
        expect(item(b, group).locator(".mention-badge")).to_have_count(0)

        # Bob replies: a quote bar while composing, then a quote block above the reply on both sides.
        message(b, seq).locator("button.reply").click()
        expect(b.locator("#reply-bar")).to_contain_text(f"Replying to {alice.user_id}")
        b.fill("#composer-text", "on it")
        b.click("#composer button[type=submit]")
        expect(b.locator("#reply-bar")).to_be_hidden()
        reply = sent(b, "on it")
        for page in (a, b):
            quote = message(page, reply).locator(".quote")
            expect(quote.locator(".quote-sender")).to_have_text(alice.user_id)
            expect(quote.locator(".quote-text")).to_have_text(f"@{bob.user_id} can you review the deploy?")
        screenshot(b, "mentions")

        # The autocomplete open, for the docs: Alice starts another mention; Escape closes it.
        a.click("#composer-text")
        a.keyboard.type("thanks @")
        expect(options.first).to_be_visible()
        screenshot(a, "mention-autocomplete")
        a.keyboard.press("Escape")
        expect(a.locator("#mention-options")).to_be_hidden()
        a.fill("#composer-text", "")

        # The quote follows its target: recalled, it says so.
        message(a, seq).locator("button.recall").click()
        expect(message(b, reply).locator(".quote")).to_have_class("quote gone")
        expect(message(b, reply).locator(".quote-text")).to_have_text("[recalled]")

        # Phone width: the quote bar and the composer fit; nothing scrolls sideways.
        b.set_viewport_size({"width": 390, "height": 800})
        message(b, reply).locator("button.reply").click()
        expect(b.locator("#reply-bar")).to_contain_text(f"Replying to {bob.user_id}")
        assert b.evaluate("() => document.documentElement.scrollWidth") <= 390
        screenshot(b, "reply-mobile")
        b.keyboard.press("Escape")
        expect(b.locator("#reply-bar")).to_be_hidden()


def test_the_owner_makes_an_admin_in_the_member_panel_and_a_member_follows_mentions_only(
    web: QimDeployment, browser: Browser
) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob, carol = acme.persona("alice"), acme.persona("bob"), acme.persona("carol")
    group = group_of(alice, bob, carol, title="Ops")
    with signed_in(browser, base, alice, bob, carol) as (a, b, c):
        for page in (a, b, c):
            open_conversation(page, group)

        # Bob, a member, sees the members and the policies, but no buttons and no settings form.
        b.click("#members-toggle")
        expect(b.locator("#member-list .member")).to_have_count(3)
        expect(b.locator("#member-list button")).to_have_count(0)
        expect(b.locator("#group-policies")).to_contain_text("Owner and admins")

        # Alice, the owner, makes Bob an admin.
        a.click("#members-toggle")
        expect(a.locator("#members-toggle")).to_have_attribute("aria-expanded", "true")
        bob_row = a.locator(f"#member-list .member[data-user='{bob.user_id}']")
        expect(bob_row.locator(".role")).to_have_text("Member")
        expect(a.locator(f"#member-list .member[data-user='{alice.user_id}'] .role")).to_have_text("Owner")
        a.get_by_role("button", name=f"Make {bob.user_id} an admin").click()
        expect(bob_row.locator(".role")).to_have_text("Admin")
        expect(bob_row.get_by_role("button", name=f"Make {bob.user_id} a member")).to_be_visible()
        expect(a.locator("#messages .system").last).to_have_text(f"{alice.user_id} made {bob.user_id} an admin")
        screenshot(a, "members")

        # Bob sees it live: the timeline row, his role, and now the settings form (admins may rename).
        expect(b.locator("#messages .system").last).to_have_text(f"{alice.user_id} made {bob.user_id} an admin")
        expect(b.locator(f"#member-list .member[data-user='{bob.user_id}'] .role")).to_have_text("Admin")
        b.fill("#group-settings input[name=title]", "Ops team")
        b.click("#group-settings button[type=submit]")
        expect(a.locator("#conversation header h2")).to_have_text("Ops team")
        expect(a.locator("#messages .system").last).to_have_text(f"{bob.user_id} renamed the group to “Ops team”")
        # An admin removes members, never the owner.
        expect(b.get_by_role("button", name=f"Remove {carol.user_id}")).to_be_visible()
        expect(b.get_by_role("button", name=f"Remove {alice.user_id}")).to_have_count(0)

        # Carol follows the group for mentions only; what she is not named in still arrives live.
        c.select_option("#tier", "mention_only")
        expect(item(c, group).locator(".tier-mark")).to_be_visible()
        assert api_ok(web.node, "GET", f"conversations/{group}", carol.token())["tier"] == "mention_only"
        a.fill("#composer-text", "deploy at five")
        a.click("#composer button[type=submit]")
        seq = sent(a, "deploy at five")
        expect(message(c, seq).locator(".text")).to_have_text("deploy at five")

        # Phone width: the member panel takes the screen; the header wraps instead of overflowing.
        c.set_viewport_size({"width": 390, "height": 800})
        c.click("#members-toggle")
        expect(c.locator("#member-panel")).to_be_visible()
        expect(c.locator("#messages")).to_be_hidden()
        width = c.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, width
        screenshot(c, "groups-mobile")
