"""In Chromium: the admin is styled (its stylesheet applied, not only served), an operator
edits a registry type there while a web client is open, which re-renders the type's
placeholder live (REGISTRY_UPDATED); the API docs list the operations and load nothing from
beyond 127.0.0.1."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.conftest import new_context, screenshot
from tests.browser.helpers import group_of, log_in, message, open_conversation, send_as
from tests.conftest import QimDeployment
from tests.harness.personas import api_ok
from tests.harness.qim_process import manage

TRANSPARENT = "rgba(0, 0, 0, 0)"


def test_operator_edits_a_registry_type_and_an_open_web_client_shows_the_new_placeholder(
    web: QimDeployment, browser: Browser
) -> None:
    acme, base = web.tenants["acme"], web.node.http_url

    manage({**web.env, "DJANGO_SUPERUSER_PASSWORD": "operator-pw"}, "createsuperuser", "--noinput",
           "--username", "operator", "--email", "op@example.com")
    api_ok(acme.node, "POST", "registry/types", acme.admin_token,
           json={"custom_type": "acme.poll.v1", "preview_template": "[poll by {sender_id}]"})
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = group_of(alice, bob, title="polls")
    seq = send_as(alice, group, "acme.poll.v1", {"question": "lunch?"})[0]["conversation_seq"]

    bob_context, bob_log = new_context(browser)
    bob_page = bob_context.new_page()
    log_in(bob_page, base, bob)
    open_conversation(bob_page, group)
    expect(message(bob_page, seq).locator(".text")).to_have_text(f"[poll by {alice.user_id}]")

    operator_context, operator_log = new_context(browser)
    admin = operator_context.new_page()
    admin.goto(f"{base}/admin/login/?next=/admin/")
    admin.fill("#id_username", "operator")
    admin.fill("#id_password", "operator-pw")
    admin.click("input[type=submit]")
    admin.wait_for_selector("#user-tools")
    # Styled: the admin's stylesheet is applied (the header gets its colour), not just served.
    header = admin.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor")
    assert header not in (TRANSPARENT, "transparent"), header
    assert admin.eval_on_selector("body", "e => getComputedStyle(e).fontFamily") != "Times New Roman"

    admin.goto(f"{base}/admin/registry/custommessagetype/?q=acme.poll.v1")
    admin.click("#result_list a:text-is('acme.poll.v1')")
    admin.fill("#id_preview_template", "[vote by {sender_id}]")
    screenshot(admin, "admin-registry-edit")
    admin.click("input[name=_save]")
    expect(admin.locator(".messagelist .success")).to_be_visible()

    # The open web client hears REGISTRY_UPDATED and re-renders with the new placeholder.
    expect(message(bob_page, seq).locator(".text")).to_have_text(f"[vote by {alice.user_id}]")
    assert bob_log.foreign() == [] and operator_log.foreign() == [], (bob_log.foreign(), operator_log.foreign())
    bob_context.close()
    operator_context.close()


def test_api_docs_list_the_operations_with_no_request_leaving_the_server(web: QimDeployment, browser: Browser) -> None:
    context, log = new_context(browser)
    page = context.new_page()
    page.goto(f"{web.node.http_url}/api/v1/docs/")
    page.wait_for_selector(".opblock")
    operations = page.locator(".opblock").count()
    assert operations > 20, operations
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/auth/token']").first).to_be_visible()
    screenshot(page, "api-docs")
    page.goto(f"{web.node.http_url}/api/v1/redoc/")
    page.wait_for_selector("[data-section-id^='operation/']", state="attached")
    # Redoc's footer asks cdn.redoc.ly for a logo; the docs' CSP blocks it before it leaves.
    page.wait_for_load_state("networkidle")
    assert log.urls and log.foreign() == [], (log.foreign(), log.blocked)
    context.close()
