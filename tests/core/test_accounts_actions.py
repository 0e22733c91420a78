"""Account actions in process (pytest-django): bootstrap, tokens, population."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from qim.actions.accounts import (
    do_bootstrap_tenant,
    do_create_user,
    do_issue_token,
    do_login,
    do_populate_users,
)
from qim.errors import Refused
from qim.models import Conversation, Device, DeviceToken, MembershipInterval, Tenant, User
from qim.queries import identity_for_token

pytestmark = pytest.mark.django_db


def test_bootstrap_is_idempotent() -> None:
    first = do_bootstrap_tenant("acme", "admin", "pw1")
    second = do_bootstrap_tenant("acme", "admin", "pw2")
    assert first.tenant.pk == second.tenant.pk
    assert first.admin.pk == second.admin.pk
    # Only digests are stored: a second run issues a new token and the first stays valid.
    assert first.token != second.token
    assert identity_for_token(first.token, None).user_id == "admin"
    assert Tenant.objects.count() == 1 and User.objects.count() == 1
    assert second.admin.is_tenant_admin
    assert do_login("acme", "admin", "pw2", "d")[1].pk == first.admin.pk
    with pytest.raises(Refused):
        do_login("acme", "admin", "pw1", "d")


def test_bootstrap_command_prints_json_last(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("qim_bootstrap", "--tenant", "acme", "--admin", "root", "--password", "pw")
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["tenant"] == "acme" and line["user_id"] == "root"
    assert identity_for_token(line["token"], None).user_id == "root"


def test_a_token_is_bound_to_its_device() -> None:
    tenant = Tenant.objects.create(name="acme")
    alice = do_create_user(tenant, "alice", "pw")
    phone = do_issue_token(alice, "phone")
    again = do_issue_token(alice, "phone")
    assert again != phone and identity_for_token(again, "phone").device_id == "phone"
    assert do_issue_token(alice, "laptop") != phone
    assert identity_for_token(phone, "phone").device_id == "phone"
    assert identity_for_token(phone, "laptop") is None
    assert identity_for_token("missing", "phone") is None


def test_usernames_are_unique_per_tenant_only() -> None:
    acme, globex = Tenant.objects.create(name="acme"), Tenant.objects.create(name="globex")
    do_create_user(acme, "admin", "pw")
    do_create_user(globex, "admin", "pw")
    with pytest.raises(Refused) as refused:
        do_create_user(acme, "admin", "other")
    assert refused.value.code == "conflict"


def test_populate_writes_users_devices_and_tokens_and_can_rerun(tmp_path) -> None:
    tenant = Tenant.objects.create(name="acme")
    tokens = do_populate_users(tenant, 2500, "pw", "populated", batch_size=1000)
    assert list(tokens)[:2] == ["u000001", "u000002"] and len(tokens) == 2500
    assert Device.objects.filter(device_id="populated").count() == 2500
    assert identity_for_token(tokens["u002500"], "populated").user_id == "u002500"
    again = do_populate_users(tenant, 2500, "pw", "populated")
    assert list(again) == list(tokens) and again["u000042"] != tokens["u000042"]
    assert DeviceToken.objects.count() == 5000  # a rerun issues new tokens; the old stay valid
    assert identity_for_token(tokens["u000042"], "populated").user_id == "u000042"
    assert identity_for_token(do_login("acme", "u000042", "pw", "populated")[0], "populated") is not None


def test_populate_command_writes_the_tokens_file(tmp_path) -> None:
    do_bootstrap_tenant("acme", "admin", "pw")
    out = tmp_path / "tokens.json"
    call_command("qim_populate", "--tenant", "acme", "--users", "30", "--tokens-out", str(out), "--device-id", "bench")
    written = json.loads(out.read_text())
    assert len(written["users"]) == 30 and written["group"] is None
    assert identity_for_token(written["users"]["u000030"], "bench") is not None


def test_populate_command_makes_a_group_of_the_first_users_joined_at_zero(tmp_path) -> None:
    do_bootstrap_tenant("acme", "admin", "pw")
    out = tmp_path / "tokens.json"
    call_command(
        "qim_populate", "--tenant", "acme", "--users", "30", "--tokens-out", str(out),
        "--group", "crowd", "--group-members", "20",
    )
    group = Conversation.objects.get(pk=json.loads(out.read_text())["group"])
    assert group.kind == Conversation.GROUP and group.title == "crowd" and not group.e2ee
    intervals = MembershipInterval.objects.filter(conversation=group)
    assert sorted(i.user.username for i in intervals) == [f"u{n:06d}" for n in range(1, 21)]
    assert {(i.joined_at, i.left_at) for i in intervals} == {(0, None)}
