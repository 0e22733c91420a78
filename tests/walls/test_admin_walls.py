"""The operators' admin across tenants (in process): the admin is for operators (Django staff),
not tenant admins, so the wall to prove is that a change scoped to one tenant's row touches
that tenant only, and that filtering by tenant shows that tenant's rows only."""

from __future__ import annotations

import pytest
from django.test import Client

from qim.actions.accounts import do_bootstrap_tenant
from qim.models import Tenant
from registry.actions import do_create_type, type_values
from registry.models import CustomMessageType

pytestmark = pytest.mark.django_db
SHARED = "shared.card.v1"


def form_data(row: CustomMessageType, **changes: object) -> dict[str, object]:
    data = {k: v for k, v in type_values(row).items() if k != "custom_type"}
    data = {k: ("on" if v is True else v) for k, v in data.items() if v is not False}
    return {**data, **changes, "changes-TOTAL_FORMS": "0", "changes-INITIAL_FORMS": "0",
            "changes-MIN_NUM_FORMS": "0", "changes-MAX_NUM_FORMS": "1000"}


def test_an_admin_change_to_one_tenants_type_leaves_the_same_name_in_another_alone(operator_client: Client) -> None:
    acme, globex = do_bootstrap_tenant("acme", "admin", "pw").tenant, do_bootstrap_tenant("globex", "admin", "pw").tenant
    mine = do_create_type(acme, {"custom_type": SHARED, "delivery_class": "persistent"}, "test")
    theirs = do_create_type(globex, {"custom_type": SHARED, "delivery_class": "persistent"}, "test")
    versions = {t.pk: Tenant.objects.get(pk=t.pk).registry_version for t in (acme, globex)}

    page = operator_client.post(f"/admin/registry/custommessagetype/{mine.pk}/change/",
                                form_data(mine, preview_template="acme's card"))
    assert page.status_code == 302, page.content.decode()[:2000]

    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.preview_template == "acme's card"
    assert theirs.preview_template != "acme's card"
    assert Tenant.objects.get(pk=acme.pk).registry_version == versions[acme.pk] + 1
    assert Tenant.objects.get(pk=globex.pk).registry_version == versions[globex.pk]


def test_filtering_by_tenant_lists_that_tenants_rows_only(operator_client: Client) -> None:
    acme, globex = do_bootstrap_tenant("acme", "admin", "pw").tenant, do_bootstrap_tenant("globex", "admin", "pw").tenant
    mine = do_create_type(acme, {"custom_type": SHARED, "delivery_class": "persistent"}, "test")
    theirs = do_create_type(globex, {"custom_type": SHARED, "delivery_class": "persistent"}, "test")
    for path, shown, hidden in [
        (f"/admin/registry/custommessagetype/?tenant__id__exact={acme.pk}", mine.pk, theirs.pk),
        (f"/admin/registry/custommessagetype/?tenant__id__exact={globex.pk}", theirs.pk, mine.pk),
    ]:
        page = operator_client.get(path).content.decode()
        assert f"/admin/registry/custommessagetype/{shown}/change/" in page
        assert f"/admin/registry/custommessagetype/{hidden}/change/" not in page
    users = operator_client.get(f"/admin/qim/user/?tenant__id__exact={acme.pk}").content.decode()
    assert users.count("/change/") >= 1 and "globex" not in users.split("<tbody>", 1)[-1].split("</tbody>")[0]
