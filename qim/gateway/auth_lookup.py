"""AUTH's token lookups gathered into one query per burst: after a node restart or a network
blip thousands of clients AUTH at once, and one lookup each (a query and a thread hop) was
most of what a reconnect cost the node (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths").

Nothing is cached: every AUTH reads the token's row as it is now, so a revoked or expired
token, or a deactivated user, stops authenticating at once, as before.
"""

from __future__ import annotations

from qim.gateway.batching import KeyedBatcher
from qim.queries.identity import Identity, identities_for_tokens

# Large enough for a storm's burst in one query, small enough for SQLite's bound variables.
MAX_TOKENS_PER_QUERY = 500


def _lookup(_key: None, requests: list[tuple[str, str | None]]) -> list[Identity | None]:
    return identities_for_tokens(requests)


_lookups: KeyedBatcher[None, tuple[str, str | None], Identity | None] = KeyedBatcher(
    "auth_lookups", _lookup, max_items=MAX_TOKENS_PER_QUERY,
)


async def identity_for_auth(token: str, device_id: str | None) -> Identity | None:
    """identity_for_token, batched: an uncontended AUTH is looked up at once, alone; AUTHs
    arriving while a lookup runs go together in the next one. Raises what the query raised
    (a database outage, say) to every AUTH of its batch."""
    return await _lookups.submit(None, (token, device_id))
