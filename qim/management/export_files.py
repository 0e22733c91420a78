"""Where exports go: a new file only its owner can read (it holds a tenant's messages)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from django.core.management.base import CommandError

from qim.models import Tenant, User


@contextmanager
def private_file(path: str) -> Iterator[IO[str]]:
    """`path` truncated and opened for writing, mode 0600 when it is created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror}") from None
    with open(fd, "w", encoding="utf-8") as out:
        yield out


def tenant_user(tenant_name: str, user_id: str) -> User:
    """The user `user_id` of the tenant; one error for a missing tenant or user, so a name
    of another tenant answers like a name that does not exist."""
    user = User.objects.select_related("tenant").filter(
        tenant__in=Tenant.objects.filter(name=tenant_name), username=user_id
    ).first()
    if user is None:
        raise CommandError(f"no user {user_id!r} in tenant {tenant_name!r}")
    return user
