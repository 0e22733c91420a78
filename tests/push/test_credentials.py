"""Which credentials a tenant's pushes use (in process): the tenant's own over the global
ones, the per-process cache and what forgets it, and qim_vapid_key's key file for make run."""

from __future__ import annotations

import os
import stat
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import override_settings

from qim.actions.accounts import do_bootstrap_tenant
from qim.errors import Refused
from qim.models import Tenant
from push_providers.actions import do_clear_provider, do_generate_vapid
from push_providers.credentials import CredentialsCache, TenantCredentials, credentials_for, vapid_key_pem
from push_providers.queries import credentials_summary
from tests.push.credential_keys import p256_pem, public_point_b64url, raw_scalar_b64url

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme() -> Tenant:
    return do_bootstrap_tenant("acme", "boss", "pw").tenant


def test_a_tenants_own_vapid_key_wins_over_the_global_one_and_delete_falls_back(acme: Tenant) -> None:
    global_key = p256_pem()
    with override_settings(QIM_VAPID_PRIVATE_KEY=raw_scalar_b64url(global_key), QIM_VAPID_SUBJECT="mailto:g@x.example"):
        assert credentials_for(acme.pk).vapid.public_key_b64url() == public_point_b64url(global_key)  # type: ignore[union-attr]
        assert credentials_summary(acme.pk)["web"]["source"] == "global"
        own = do_generate_vapid(acme, "mailto:own@x.example")
        assert credentials_for(acme.pk).vapid.public_key_b64url() == own  # type: ignore[union-attr]
        assert credentials_summary(acme.pk)["web"] == {"configured": True, "public_key": own,
                                                       "subject": "mailto:own@x.example", "source": "tenant"}
        do_clear_provider(acme, "web")
        assert credentials_summary(acme.pk)["web"]["public_key"] == public_point_b64url(global_key)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_serves_a_tenant_until_its_ttl_then_resolves_again() -> None:
    clock, calls = Clock(), []
    cache = CredentialsCache(clock)

    def resolve(tenant_id: int) -> TenantCredentials:
        calls.append(tenant_id)
        return TenantCredentials(None, None, None)

    with override_settings(QIM_PUSH_CREDENTIALS_CACHE_S=5):
        first = cache.get(1, resolve)
        clock.now += 4.9
        assert cache.get(1, resolve) is first and calls == [1]
        cache.get(2, resolve)
        clock.now += 0.2
        assert cache.get(1, resolve) is not first and calls == [1, 2, 1]
        cache.forget(2)
        cache.get(2, resolve)
        assert calls == [1, 2, 1, 2]
    with override_settings(QIM_PUSH_CREDENTIALS_CACHE_S=0):
        cache.get(1, resolve)
        cache.get(1, resolve)
        assert calls == [1, 2, 1, 2, 1, 1]


@pytest.mark.django_db(transaction=True)
def test_a_change_forgets_the_cached_tenant_once_committed() -> None:
    acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
    with override_settings(QIM_PUSH_CREDENTIALS_CACHE_S=3600):
        assert credentials_for(acme.pk).vapid is None  # cached: nothing configured
        with transaction.atomic():
            public_key = do_generate_vapid(acme, "mailto:ops@example.com")
            assert credentials_for(acme.pk).vapid is None  # not committed yet: still the cached answer
        assert credentials_for(acme.pk).vapid.public_key_b64url() == public_key  # type: ignore[union-attr]
        with transaction.atomic():
            do_clear_provider(acme, "web")
        assert credentials_for(acme.pk).vapid is None


def test_qim_vapid_key_creates_a_private_file_once_and_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "var" / "vapid-private.pem"
    first, second = StringIO(), StringIO()
    call_command("qim_vapid_key", "--out", str(out), stdout=first)
    pem = out.read_text()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert first.getvalue().strip() == public_point_b64url(vapid_key_pem(pem))
    call_command("qim_vapid_key", "--out", str(out), stdout=second)
    assert out.read_text() == pem and second.getvalue() == first.getvalue()
    # What make run passes as QIM_VAPID_PRIVATE_KEY is the file's text: it must load as is.
    with override_settings(QIM_VAPID_PRIVATE_KEY=pem, QIM_VAPID_SUBJECT="mailto:admin@localhost"):
        acme = do_bootstrap_tenant("acme", "boss", "pw").tenant
        assert credentials_for(acme.pk).vapid.public_key_b64url() == first.getvalue().strip()  # type: ignore[union-attr]


def test_qim_vapid_key_refuses_to_overwrite_a_file_that_is_not_a_key(tmp_path: Path) -> None:
    out = tmp_path / "vapid-private.pem"
    out.write_text("not a key")
    with pytest.raises(CommandError, match="not a P-256 private key"):
        call_command("qim_vapid_key", "--out", str(out))
    assert out.read_text() == "not a key"


def test_a_global_credential_set_wrongly_answers_unavailable_naming_the_setting(acme: Tenant, tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.p8")
    with override_settings(QIM_APNS_KEY_FILE=missing, QIM_APNS_KEY_ID="ABCDEFGHIJ", QIM_APNS_TEAM_ID="TEAM123456",
                           QIM_APNS_BUNDLE_ID="com.example.qim", QIM_PUSH_CREDENTIALS_CACHE_S=0):
        with pytest.raises(Refused) as refused:
            credentials_summary(acme.pk)
    assert refused.value.http_status == 503 and "QIM_APNS_KEY_FILE" in refused.value.message
    assert missing not in refused.value.message
    with override_settings(QIM_VAPID_PRIVATE_KEY="not-a-key", QIM_PUSH_CREDENTIALS_CACHE_S=0):
        with pytest.raises(Refused) as refused:
            credentials_for(acme.pk)
    assert refused.value.code == "unavailable" and "not-a-key" not in refused.value.message
