"""Revoking credentials: one token (a device logs out), or all of a user's (deactivation)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from qim.errors import Refused
from qim.models import Device, DeviceToken, User
from qim.revocation import TOKEN_REVOKED, USER_DEACTIVATED, notify_revoked_on_commit


def do_revoke_token(token: DeviceToken) -> None:
    """Delete one token; its sockets on every node are closed (4403) after the commit."""
    user = token.device.user
    with transaction.atomic():
        DeviceToken.objects.filter(digest=token.digest).delete()
        notify_revoked_on_commit(user.tenant_id, user.username, [token.digest], TOKEN_REVOKED)


def check_deactivate_user(admin: User, user_id: str) -> int:
    """A tenant admin deactivates a user of their own tenant; answers how many tokens went.

    `not_found` for a user of another tenant exactly as for a missing one; `conflict` for
    the admin themself (a tenant must keep someone able to undo it)."""
    user = User.objects.filter(tenant_id=admin.tenant_id, username=user_id).first()
    if user is None:
        raise Refused("not_found", f"no user {user_id!r}")
    if user.pk == admin.pk:
        raise Refused("conflict", "you cannot deactivate yourself")
    return do_deactivate_user(user)


def do_deactivate_user(user: User) -> int:
    """Mark the user inactive and delete all their tokens, in one transaction; after the
    commit every node closes their sockets (4403). They cannot log in until reactivated.
    Idempotent. Answers how many tokens were deleted."""
    with transaction.atomic():
        User.objects.filter(pk=user.pk).update(is_active=False)
        deleted, _ = DeviceToken.objects.filter(device__user_id=user.pk).delete()
        notify_revoked_on_commit(user.tenant_id, user.username, None, USER_DEACTIVATED)
    user.is_active = False
    return deleted


def do_activate_user(user: User) -> None:
    """Let a deactivated user log in again (with a new token: the old ones are gone)."""
    User.objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True


@receiver(pre_delete, sender=Device, dispatch_uid="qim.announce_deleted_device_tokens")
def announce_deleted_device_tokens(sender: type[Device], instance: Device, **kwargs: Any) -> None:
    """A device deleted by any path (the admin, or its user's or tenant's deletion) takes its
    tokens along: announce them like a revocation, so their sockets close at once."""
    digests = list(DeviceToken.objects.filter(device=instance).values_list("digest", flat=True))
    if digests:
        user = User.objects.only("tenant_id", "username").get(pk=instance.user_id)
        notify_revoked_on_commit(user.tenant_id, user.username, digests, TOKEN_REVOKED)
