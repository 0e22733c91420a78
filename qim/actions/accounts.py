"""Writes for tenants, users, devices and tokens."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction

from qim.errors import Refused
from qim.hooks import tenant_created
from qim.models import Device, DeviceToken, Tenant, User, new_token_key, token_digest
from qim.revocation import TOKEN_REVOKED, notify_revoked_on_commit


@dataclass(frozen=True)
class Bootstrapped:
    tenant: Tenant
    admin: User
    token: str


BOOTSTRAP_DEVICE_ID = "bootstrap"


def do_bootstrap_tenant(tenant_name: str, admin_username: str, password: str) -> Bootstrapped:
    """Create (or converge) a tenant and its admin; idempotent, so safe to run on every deploy.

    Also installs the tenant's built-in registry types. A second run keeps every id, resets
    the admin's password to the one given and issues a new token (earlier ones stay valid:
    only digests are stored, so an old token cannot be shown again). It also reactivates a
    deactivated admin: bootstrap is how an operator regains a tenant.
    """
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(name=tenant_name)
        admin = User.objects.filter(tenant=tenant, username=admin_username).first()
        if admin is None:
            admin = User(tenant=tenant, username=admin_username, is_tenant_admin=True)
        admin.is_tenant_admin = True
        admin.is_active = True
        admin.set_password(password)
        admin.save()
        token = do_issue_token(admin, BOOTSTRAP_DEVICE_ID)
    # After the commit above: the registry app installs the built-in qim.* types here (each
    # creation is its own transaction).
    for listener in tenant_created:
        listener(tenant)
    return Bootstrapped(tenant=tenant, admin=admin, token=token)


def do_create_user(
    tenant: Tenant,
    username: str,
    password: str,
    *,
    display_name: str = "",
    is_tenant_admin: bool = False,
) -> User:
    """Create one user; raises Refused("conflict") when the username is taken."""
    user = User(
        tenant=tenant,
        username=username,
        display_name=display_name,
        is_tenant_admin=is_tenant_admin,
    )
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise Refused("conflict", f"user {username!r} already exists") from None
    return user


def do_issue_token(user: User, device_id: str) -> str:
    """A new token for (user, device), creating the device the first time; answers the
    plaintext, which exists nowhere else from now on (the database keeps its digest).

    A device keeps its newest DeviceToken.MAX_TOKENS_PER_DEVICE tokens; older ones are
    revoked (their sockets closed on every node after the commit).
    Joins the caller's transaction if there is one.
    """
    token = new_token_key()
    with transaction.atomic():
        device, _ = Device.objects.get_or_create(user=user, device_id=device_id)
        DeviceToken.objects.create(digest=token_digest(token), device=device)
        kept = DeviceToken.objects.filter(device=device).order_by("-created_at", "-pk")
        stale = list(kept.values_list("pk", flat=True)[DeviceToken.MAX_TOKENS_PER_DEVICE :])
        if stale:
            DeviceToken.objects.filter(pk__in=stale).delete()
            notify_revoked_on_commit(user.tenant_id, user.username, stale, TOKEN_REVOKED)
    return token


# The message of every refused login: a wrong password, an unknown user or tenant and a
# deactivated user must not be told apart (protocol.md §13).
LOGIN_REFUSED = "unknown tenant, username or password"


def do_login(tenant_name: str, username: str, password: str, device_id: str) -> tuple[str, User]:
    """Check a password and answer a new token of the device; Refused("unauthenticated")
    else, the same for every reason, after the same work: without a user the password is
    checked against a dummy hash, as Django's ModelBackend does, so timing tells nothing."""
    user = (
        User.objects.select_related("tenant")
        .filter(tenant__name=tenant_name, username=username)
        .first()
    )
    if user is None:
        make_password(password)  # the cost of a password check, for nobody
        raise Refused("unauthenticated", LOGIN_REFUSED)
    if not user.check_password(password) or not user.is_active:
        raise Refused("unauthenticated", LOGIN_REFUSED)
    return do_issue_token(user, device_id), user


def do_populate_users(
    tenant: Tenant, count: int, password: str, device_id: str, *, batch_size: int = 2000
) -> dict[str, str]:
    """Bulk-create users u000001..uNNNNNN with one device and token each; answers their tokens.

    One password hash is shared by all (hashing 100 000 times would take hours); existing
    users are kept. Every user gets a new token for `device_id` (earlier ones stay valid):
    only digests are stored, so the file written from the answer is the one place the
    tokens exist. SHA-256 of 100 000 tokens takes a fraction of a second.
    """
    usernames = [f"u{i:06d}" for i in range(1, count + 1)]
    password_hash = make_password(password)
    tokens: dict[str, str] = {}
    for start in range(0, count, batch_size):
        chunk = usernames[start : start + batch_size]
        with transaction.atomic():
            User.objects.bulk_create(
                [User(tenant=tenant, username=u, password_hash=password_hash) for u in chunk],
                ignore_conflicts=True,
            )
            user_pks = dict(
                User.objects.filter(tenant=tenant, username__in=chunk).values_list("username", "pk")
            )
            Device.objects.bulk_create(
                [Device(user_id=pk, device_id=device_id) for pk in user_pks.values()],
                ignore_conflicts=True,
            )
            devices = dict(
                Device.objects.filter(user_id__in=user_pks.values(), device_id=device_id).values_list(
                    "user_id", "pk"
                )
            )
            issued = {username: new_token_key() for username in user_pks}
            DeviceToken.objects.bulk_create(
                [DeviceToken(digest=token_digest(issued[u]), device_id=devices[pk]) for u, pk in user_pks.items()]
            )
            tokens.update(issued)
    return {u: tokens[u] for u in usernames}


def do_set_push_credentials(user: User, device_id: str, platform: str, push_token: str, voip_token: str) -> Device:
    """Store a device's push credentials; `not_found` for a device the user never logged in."""
    device = Device.objects.filter(user=user, device_id=device_id).first()
    if device is None:
        raise Refused("not_found", f"no device {device_id!r} of yours")
    device.push_platform, device.push_token, device.voip_token = platform, push_token, voip_token
    device.save(update_fields=["push_platform", "push_token", "voip_token"])
    return device


def do_clear_push_credentials(user: User, device_id: str) -> None:
    """Forget a device's push credentials (a logout, push turned off): no new PushTask names
    it, and its pending ones fail at the worker without a send. `not_found` as above."""
    if not Device.objects.filter(user=user, device_id=device_id).update(push_platform="", push_token="", voip_token=""):
        raise Refused("not_found", f"no device {device_id!r} of yours")


def clear_rejected_push_token(device_pk: int, token: str) -> None:
    """Forget a token (or Web Push subscription) a provider called unregistered or invalid,
    but only while the device still holds that exact one: a device that registered a new
    token meanwhile keeps it."""
    if not token:
        return
    Device.objects.filter(pk=device_pk, push_token=token).update(push_token="")
    Device.objects.filter(pk=device_pk, voip_token=token).update(voip_token="")
