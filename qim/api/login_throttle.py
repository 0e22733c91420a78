"""POST auth/token is throttled per client address and per tenant+username (protocol.md §13),
on the `limits` moving window of qim/infra/ratelimit.py (in Redis when there are several nodes, so
the budget is shared by every node)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from limits import parse

from qim.errors import Refused
from qim.infra.ratelimit import take_item


def check_login_rate(tenant: str, username: str, address: str) -> None:
    """Take one login attempt for the address and for the account, or raise
    Refused("rate_limited") with retry_after_ms. Every attempt counts, right or wrong, and an
    unknown account is counted like a known one, so the answer tells nothing of either."""
    refusal = async_to_sync(_take)(tenant, username, address)
    if refusal is not None:
        raise refusal


async def _take(tenant: str, username: str, address: str) -> Refused | None:
    per_address = settings.QIM_AUTH_TOKEN_RATE_PER_ADDRESS
    refusal = await take_item("auth_token_rate_per_address", parse(per_address), per_address, address or "-")
    if refusal is not None:
        return refusal
    per_account = settings.QIM_AUTH_TOKEN_RATE_PER_ACCOUNT
    return await take_item("auth_token_rate_per_account", parse(per_account), per_account, tenant, username)
