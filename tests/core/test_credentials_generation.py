"""The credentials generation's triggers (migration 0009), in process (pytest-django, SQLite;
the PostgreSQL triggers are exercised by tests/gateway/test_credentials_generation_node.py):
every way a token stops authenticating moves the generation, whether through an action, the
admin, a queryset's delete() or update(), or raw SQL; a write that changes no credential
(a user's display name, a device's push token, a new token) leaves it where it was, so the
nodes re-check every socket only after a real change."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant, do_create_user, do_issue_token
from qim.actions.credentials import do_deactivate_user, do_revoke_token
from qim.models import CredentialsGeneration, Device, DeviceToken, Tenant, User
from qim.queries.credentials import credentials_generation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def generation_row() -> None:
    """The row migration 0009 makes, as in a migrated database: another test of the suite's
    that runs with `transaction=True` flushes every table afterwards, migration data included."""
    CredentialsGeneration.objects.get_or_create(pk=1)


@pytest.fixture
def alice() -> User:
    boot = do_bootstrap_tenant("acme", "boss", "pw")
    user = do_create_user(boot.tenant, "alice", "pw")
    do_issue_token(user, "phone")
    return user


def moved(write) -> bool:  # type: ignore[no-untyped-def]
    before = credentials_generation()
    assert before is not None, "the migration did not create the generation row"
    write()
    return credentials_generation() != before


def test_revocations_by_actions_move_the_generation(alice: User) -> None:
    token = DeviceToken.objects.filter(device__user=alice).get()
    assert moved(lambda: do_revoke_token(token))
    do_issue_token(alice, "phone")
    assert moved(lambda: do_deactivate_user(alice))


def test_querysets_move_the_generation(alice: User) -> None:
    assert moved(lambda: DeviceToken.objects.filter(device__user=alice).delete())
    assert moved(lambda: User.objects.filter(pk=alice.pk).update(is_active=False))
    assert moved(lambda: User.objects.filter(pk=alice.pk).update(is_active=True))
    other = Tenant.objects.create(name="other")
    assert moved(lambda: User.objects.filter(pk=alice.pk).update(tenant=other))


def test_devices_and_users_deleted_or_moved_move_the_generation(alice: User) -> None:
    do_issue_token(alice, "tablet")
    carol = do_create_user(alice.tenant, "carol", "pw")
    assert moved(lambda: Device.objects.filter(user=alice, device_id="tablet").update(user=carol))
    assert moved(lambda: Device.objects.filter(user=alice, device_id="phone").update(device_id="renamed"))
    assert moved(lambda: Device.objects.filter(user=carol).delete())
    assert moved(lambda: User.objects.filter(pk=alice.pk).delete())


def test_raw_sql_moves_the_generation(alice: User) -> None:
    digest = DeviceToken.objects.filter(device__user=alice).get().digest

    def execute(sql: str, params: list) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    assert moved(lambda: execute("UPDATE qim_devicetoken SET created_at = created_at WHERE digest = %s", [digest]))
    assert moved(lambda: execute("UPDATE qim_user SET is_active = %s WHERE id = %s", [False, alice.pk]))
    assert moved(lambda: execute("DELETE FROM qim_devicetoken WHERE digest = %s", [digest]))


def test_the_admin_moves_the_generation(alice: User, operator_client: Client) -> None:
    device = alice.devices.get(device_id="phone")
    assert moved(lambda: operator_client.post(f"/admin/qim/device/{device.pk}/delete/", {"post": "yes"}))
    do_issue_token(alice, "phone")
    assert moved(lambda: operator_client.post(
        "/admin/qim/user/", {"action": "deactivate_selected", "_selected_action": [alice.pk]}))


def test_writes_that_change_no_credential_leave_it(alice: User) -> None:
    assert not moved(lambda: User.objects.filter(pk=alice.pk).update(display_name="Alice A."))
    assert not moved(lambda: alice.save())
    assert not moved(lambda: Device.objects.filter(user=alice).update(push_token="t"))
    assert not moved(lambda: do_issue_token(alice, "laptop"))
