"""In Chromium: an operator opens a group in the admin, sees its settings, its members'
roles and tiers, sets its @all policy and makes a member an admin by the membership list's
action; the members read both changes over REST."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.conftest import new_context, screenshot
from tests.browser.helpers import group_of
from tests.conftest import QimDeployment
from tests.harness.personas import api_ok
from tests.harness.qim_process import manage


def test_operator_sees_a_groups_roles_and_tiers_and_sets_its_policy(web: QimDeployment, browser: Browser) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    manage({**web.env, "DJANGO_SUPERUSER_PASSWORD": "operator-pw"}, "createsuperuser", "--noinput",
           "--username", "group-operator", "--email", "op@example.com")
    alice, bob, carol = (acme.persona(n) for n in ("alice", "bob", "carol"))
    group = group_of(alice, bob, carol, title="Ops")
    api_ok(acme.node, "PATCH", f"conversations/{group}/members/{bob.user_id}", alice.token(), json={"role": "admin"})
    api_ok(acme.node, "PATCH", f"conversations/{group}/members/{carol.user_id}", carol.token(),
           json={"tier": "mention_only"})

    context, log = new_context(browser, height=1500)
    admin = context.new_page()
    admin.goto(f"{base}/admin/login/?next=/admin/")
    admin.fill("#id_username", "group-operator")
    admin.fill("#id_password", "operator-pw")
    admin.click("input[type=submit]")
    admin.wait_for_selector("#user-tools")
    admin.goto(f"{base}/admin/qim/conversation/{group}/change/")
    table = admin.locator("table.qim-intervals")
    expect(table.locator("tr", has_text=bob.user_id)).to_contain_text("admin")
    expect(table.locator("tr", has_text=carol.user_id)).to_contain_text("mention_only (chosen)")
    expect(table.locator("tr", has_text=alice.user_id)).to_contain_text("owner")
    expect(admin.locator(".field-member_count .readonly")).to_have_text("3")
    admin.select_option("#id_mention_all_policy", "members")
    screenshot(admin, "admin-group")
    admin.click("input[name=_save]")
    expect(admin.locator(".messagelist .success")).to_be_visible()

    settings = api_ok(acme.node, "GET", f"conversations/{group}", carol.token())
    assert (settings["mention_all_policy"], settings["title"]) == ("members", "Ops")

    # Roles change on the membership list, by its actions (through do_set_role).
    admin.goto(f"{base}/admin/qim/conversation/{group}/change/")
    admin.click("table.qim-intervals + p a")
    row = admin.locator("#result_list tr", has_text=carol.user_id)
    row.locator("input.action-select").check()
    admin.select_option("select[name=action]", "make_admins")
    admin.click("button[name=index]")
    expect(admin.locator(".messagelist .success")).to_contain_text("1 role(s) changed to admin.")
    expect(admin.locator("#result_list tr", has_text=carol.user_id)).to_contain_text("admin")
    members = api_ok(acme.node, "GET", f"conversations/{group}/members", alice.token())["members"]
    assert {m["user_id"]: m["role"] for m in members}[carol.user_id] == "admin"
    assert log.foreign() == [], log.foreign()
    context.close()
