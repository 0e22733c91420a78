"""Token storage in process (pytest-django): digests only, the migration that hashes tokens
issued before it, population, the per-device cap, and the admin's deactivate action."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant, do_create_user, do_issue_token, do_login
from qim.errors import Refused
from qim.models import DeviceToken, Tenant, User
from qim.queries import identity_for_token
from qim.revocation import CREDENTIALS_GROUP

class CountingHasher(MD5PasswordHasher):
    """Counts how often the hash function runs, whether to make a hash or to check one."""

    algorithm = "counting_md5"
    runs = 0

    def encode(self, password, salt):  # type: ignore[no-untyped-def]
        CountingHasher.runs += 1
        return super().encode(password, salt)


BEFORE = [("qim", "0004_anchor_events_by_time")]
AFTER = [("qim", "0006_hash_existing_tokens")]


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def migrate(targets: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_hashes_tokens_issued_before_it_and_they_keep_working() -> None:
    old = migrate(BEFORE)
    try:
        tenant = old.get_model("qim", "Tenant").objects.create(name="acme")
        user = old.get_model("qim", "User").objects.create(tenant=tenant, username="alice", password_hash="x")
        device = old.get_model("qim", "Device").objects.create(user=user, device_id="phone")
        plaintext = "5845f750e3442d65e755c30b756789e9c31a35f7"  # 40 hex, as tokens were
        old.get_model("qim", "DeviceToken").objects.create(key=plaintext, device=device)
        migrate(AFTER)
        with connection.cursor() as cursor:
            cursor.execute("SELECT digest FROM qim_devicetoken")
            assert cursor.fetchall() == [(sha256(plaintext),)]
    finally:
        call_command("migrate", verbosity=0)
    identity = identity_for_token(plaintext, "phone")
    assert identity is not None and identity.user_id == "alice"


@pytest.mark.django_db
def test_tokens_are_stored_as_digests_only() -> None:
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    token, _ = do_login("acme", "admin", "pw", "phone")
    digests = set(DeviceToken.objects.values_list("digest", flat=True))
    assert digests == {sha256(boot.token), sha256(token)}
    assert len(token) >= 43  # 256 random bits


@pytest.mark.django_db
def test_populate_writes_digests_and_hands_out_the_tokens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    do_bootstrap_tenant("acme", "admin", "pw")
    out = tmp_path / "tokens.json"
    call_command("qim_populate", "--tenant", "acme", "--users", "50", "--tokens-out", str(out))
    tokens = json.loads(out.read_text())["users"]
    stored = set(DeviceToken.objects.filter(device__device_id="populated").values_list("digest", flat=True))
    assert stored == {sha256(t) for t in tokens.values()}
    assert identity_for_token(tokens["u000050"], "populated").user_id == "u000050"


@pytest.mark.django_db
def test_a_device_keeps_its_newest_tokens_only() -> None:
    alice = do_create_user(Tenant.objects.create(name="acme"), "alice", "pw")
    tokens = [do_issue_token(alice, "phone") for _ in range(DeviceToken.MAX_TOKENS_PER_DEVICE + 2)]
    assert identity_for_token(tokens[0], "phone") is None and identity_for_token(tokens[1], "phone") is None
    assert all(identity_for_token(t, "phone") for t in tokens[2:])


@pytest.mark.django_db
def test_the_admin_deactivates_and_reactivates_users_and_shows_no_digest(operator_client: Client) -> None:
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    alice = do_create_user(boot.tenant, "alice", "pw")
    token = do_issue_token(alice, "phone")
    page = operator_client.get(f"/admin/qim/user/{alice.pk}/change/").content.decode()
    assert token not in page and sha256(token) not in page
    changelist = "/admin/qim/user/"
    answer = operator_client.post(changelist, {"action": "deactivate_selected", "_selected_action": [alice.pk]}, follow=True)
    assert answer.status_code == 200 and "1 user(s) deactivated, 1 token(s) revoked" in answer.content.decode()
    assert not User.objects.get(pk=alice.pk).is_active
    assert identity_for_token(token, "phone") is None
    with pytest.raises(Refused):
        do_login("acme", "alice", "pw", "phone")
    operator_client.post(changelist, {"action": "activate_selected", "_selected_action": [alice.pk]})
    assert identity_for_token(do_login("acme", "alice", "pw", "phone")[0], "phone").user_id == "alice"


@pytest.mark.django_db
def test_every_refused_login_costs_one_hash(settings) -> None:  # type: ignore[no-untyped-def]
    """An unknown user, tenant or a deactivated user costs what a wrong password does: the
    timing of the refusal tells nothing (the count stands in for the time)."""
    settings.PASSWORD_HASHERS = ["tests.core.test_credentials_storage.CountingHasher"]
    tenant = Tenant.objects.create(name="acme")
    do_create_user(tenant, "alice", "pw")
    gone = do_create_user(tenant, "gone", "pw")
    gone.is_active = False
    gone.save()
    attempts = [("acme", "alice", "wrong"), ("acme", "nobody", "pw"), ("globex", "alice", "pw"), ("acme", "gone", "pw")]
    for tenant_name, username, password in attempts:
        CountingHasher.runs = 0
        with pytest.raises(Refused) as refused:
            do_login(tenant_name, username, password, "phone")
        assert (refused.value.code, refused.value.message, CountingHasher.runs) == (
            "unauthenticated", "unknown tenant, username or password", 1), username


@pytest.mark.django_db
def test_deleting_a_device_in_the_admin_announces_its_tokens(operator_client: Client, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    """The same notice as a revocation, to the group every node listens on (here the
    in-process channel layer, which a listener joins like a node)."""
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    alice = do_create_user(boot.tenant, "alice", "pw")
    tokens = [do_issue_token(alice, "phone"), do_issue_token(alice, "phone")]
    layer = get_channel_layer()

    async def next_message() -> dict:
        return await asyncio.wait_for(layer.receive("test.listener"), 30)

    async_to_sync(layer.group_add)(CREDENTIALS_GROUP, "test.listener")
    try:
        device = alice.devices.get(device_id="phone")
        with django_capture_on_commit_callbacks(execute=True):
            answer = operator_client.post(f"/admin/qim/device/{device.pk}/delete/", {"post": "yes"})
        assert answer.status_code == 302
        message = async_to_sync(next_message)()
    finally:
        async_to_sync(layer.group_discard)(CREDENTIALS_GROUP, "test.listener")
    assert (message["type"], message["tenant"], message["user"], message["reason"]) == (
        "credentials.revoked", boot.tenant.pk, "alice", "token_revoked")
    assert sorted(message["digests"]) == sorted(sha256(t) for t in tokens)
    assert not DeviceToken.objects.filter(device__user=alice).exists()
