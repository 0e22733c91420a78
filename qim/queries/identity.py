"""Who a token speaks for, and which tokens are still good."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from qim.models import DeviceToken, token_digest
from qim.queries.identity_rows import TokenRow, live_digests, token_rows


@dataclass(frozen=True)
class Identity:
    """Who a token speaks for, resolved once at AUTH and kept for the connection's life."""

    tenant_id: int
    tenant_name: str
    user_pk: int
    user_id: str
    device_id: str
    is_tenant_admin: bool
    registry_version: int
    user: Any
    # Which token, and when it was issued: the node re-checks both (qim/frames/credentials.py).
    token_digest: str = ""
    token_issued_ms: int = 0


def token_expires_at_ms(issued_ms: int) -> int | None:
    """When a token issued at `issued_ms` stops working; None while QIM_TOKEN_TTL_S is off."""
    if settings.QIM_TOKEN_TTL_S <= 0:
        return None
    return issued_ms + int(settings.QIM_TOKEN_TTL_S * 1000)


def live_tokens() -> QuerySet[DeviceToken]:
    """Tokens that still authenticate: their user is active and, when QIM_TOKEN_TTL_S is
    set, they are younger than that."""
    tokens = DeviceToken.objects.filter(device__user__is_active=True)
    issued_after = _issued_after()
    if issued_after is not None:
        tokens = tokens.filter(created_at__gt=issued_after)
    return tokens


def live_token_for(token: str) -> DeviceToken | None:
    """The row of a live token given in plaintext (looked up by its digest), with its
    device, user and tenant."""
    return live_tokens().select_related("device__user__tenant").filter(digest=token_digest(token)).first()


def live_digests_among(digests: list[str]) -> set[str]:
    """Which of these token digests still authenticate (a node's periodic re-check), read as
    live_tokens() filters (qim/queries/identity_rows.py), 1 000 digests a statement."""
    live: set[str] = set()
    issued_after = _issued_after()
    for start in range(0, len(digests), 1000):
        live |= live_digests(digests[start : start + 1000], issued_after)
    return live


def identity_for_token(key: str, device_id: str | None) -> Identity | None:
    """The identity of `key`, or None when it is unknown, revoked, expired, its user
    deactivated, or (if given) bound to another device."""
    return identities_for_tokens([(key, device_id)])[0]


def identities_for_tokens(requests: list[tuple[str, str | None]]) -> list[Identity | None]:
    """identity_for_token for each (key, device_id), in order, with one query for them all:
    a reconnect storm brings thousands of AUTHs at once (docs/performance.md,
    "Lean handshake, upgrade, frame and per-socket paths"). The rows are
    read as live_tokens() filters (qim/queries/identity_rows.py), into plain rows."""
    digests = [token_digest(key) for key, _ in requests]
    rows = token_rows(set(digests), _issued_after())
    answered: set[str] = set()
    identities = []
    for digest, (_, device_id) in zip(digests, requests):
        token = rows.get(digest)
        # Each connection keeps a User of its own, as when each AUTH read its own row.
        identities.append(None if token is None else _identity_of(token, device_id, copy_user=digest in answered))
        answered.add(digest)
    return identities


def _issued_after() -> datetime | None:
    """The moment a live token's created_at must be after, or None while QIM_TOKEN_TTL_S is
    off: live_tokens()'s filter and AUTH's row query (identity_rows) both ask it."""
    if settings.QIM_TOKEN_TTL_S <= 0:
        return None
    return timezone.now() - timedelta(seconds=settings.QIM_TOKEN_TTL_S)


def _identity_of(token: TokenRow, device_id: str | None, copy_user: bool) -> Identity | None:
    if device_id is not None and token.device_id != device_id:
        return None
    user = copy.copy(token.user) if copy_user else token.user
    return Identity(
        tenant_id=user.tenant_id,
        tenant_name=user.tenant.name,
        user_pk=user.pk,
        user_id=user.username,
        device_id=token.device_id,
        is_tenant_admin=user.is_tenant_admin,
        registry_version=user.tenant.registry_version,
        user=user,
        token_digest=token.digest,
        token_issued_ms=int(token.created_at.timestamp() * 1000),
    )
