"""AUTH's rows in process (qim/queries/identity_rows.py): the User and Tenant it builds without
Model.__init__ are the instances Django's from_db and select_related build, a model with a
post_init receiver still goes through from_db, SQLite's datetime text is read as Django reads it,
and the re-check's live digests are live_tokens()'s."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.utils import timezone

from qim.actions.accounts import do_bootstrap_tenant, do_create_user, do_issue_token
from qim.actions.credentials import do_deactivate_user, do_revoke_token
from qim.models import DeviceToken, Tenant, User, token_digest
from qim.queries.identity import live_digests_among, live_tokens
from qim.queries.identity_rows import _sqlite_datetime, instance_from_db, token_rows

pytestmark = pytest.mark.django_db


def fields(instance: object) -> dict[str, object]:
    """What an instance holds: every attribute but its state, and the state's adding and db."""
    state = instance._state  # type: ignore[attr-defined]
    return {**{k: v for k, v in vars(instance).items() if k != "_state"}, "adding": state.adding, "db": state.db}


def test_instances_are_from_dbs() -> None:
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    alice = do_create_user(boot.tenant, "alice", "pw")
    for model, pk in ((User, alice.pk), (Tenant, boot.tenant.pk)):
        names = [f.attname for f in model._meta.concrete_fields]
        values = list(model.objects.filter(pk=pk).values_list(*names).get())
        built, expected = instance_from_db(model, "default", values), model.from_db("default", None, values)
        assert type(built) is model
        assert fields(built) == fields(expected)
        assert built == expected and not built._state.adding
    with pytest.raises(ValueError):
        instance_from_db(User, "default", [alice.pk])


def test_a_post_init_receiver_still_runs() -> None:
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    seen: list[object] = []

    def receiver(sender: type, instance: object, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Tenant)
    try:
        values = list(Tenant.objects.filter(pk=boot.tenant.pk).values_list(
            *[f.attname for f in Tenant._meta.concrete_fields]).get())
        built = instance_from_db(Tenant, "default", values)
    finally:
        post_init.disconnect(receiver, sender=Tenant)
    assert seen == [built] and not built._state.adding


def test_token_rows_user_is_select_relateds() -> None:
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    alice = do_create_user(boot.tenant, "alice", "pw")
    token = do_issue_token(alice, "phone")
    digest = token_digest(token)
    rows = token_rows({digest, "no-such-digest"}, None)
    assert list(rows) == [digest]
    row = rows[digest]
    orm = DeviceToken.objects.select_related("device__user__tenant").get(digest=digest)
    assert (row.device_id, row.created_at) == (orm.device.device_id, orm.created_at)
    assert fields(row.user) == fields(orm.device.user)
    assert fields(row.user.tenant) == fields(orm.device.user.tenant)
    assert row.user.created_at.tzinfo is not None


@pytest.mark.parametrize("ttl_s", [0, 3600])
def test_live_digests_are_live_tokens(settings, ttl_s: int) -> None:  # type: ignore[no-untyped-def]
    """The re-check's statement answers what live_tokens() answers: an active user's token, not
    a revoked one, a deactivated user's, an expired one (when tokens expire) or an unknown one."""
    settings.QIM_TOKEN_TTL_S = ttl_s
    boot = do_bootstrap_tenant("acme", "admin", "pw")
    alice, bob = do_create_user(boot.tenant, "alice", "pw"), do_create_user(boot.tenant, "bob", "pw")
    live, revoked, old = (token_digest(do_issue_token(alice, device)) for device in ("phone", "laptop", "tablet"))
    deactivated = token_digest(do_issue_token(bob, "phone"))
    do_revoke_token(DeviceToken.objects.get(digest=revoked))
    do_deactivate_user(bob)
    DeviceToken.objects.filter(digest=old).update(created_at=timezone.now() - timedelta(hours=2))
    asked = [live, revoked, old, deactivated, "no-such-digest"]
    expected = set(live_tokens().filter(digest__in=asked).values_list("digest", flat=True))
    assert expected == ({live} if ttl_s else {live, old})
    assert live_digests_among(asked) == expected
    assert live_digests_among([]) == set()


@pytest.mark.parametrize("text", ["2026-12-05 02:35:37.123456", "2026-12-05 02:35:37", "2026-12-05T02:35:37+02:00",
                                  "2026-12-05T02:35:37Z", "2026-12-05", "2026-12-05 02:35:37,5", "not a date"])
def test_sqlite_datetimes_read_as_djangos(text: str, settings) -> None:  # type: ignore[no-untyped-def]
    django_converter = connection.ops.convert_datetimefield_value
    for use_tz in (True, False):
        settings.USE_TZ = use_tz
        try:
            expected = django_converter(text, None, connection)
        except Exception as exc:  # Django's answer to text it cannot read: the same error
            with pytest.raises(type(exc)):
                _sqlite_datetime(django_converter, text, None, connection)
            continue
        got = _sqlite_datetime(django_converter, text, None, connection)
        assert (got, getattr(got, "tzinfo", None)) == (expected, getattr(expected, "tzinfo", None)), (text, use_tz)
