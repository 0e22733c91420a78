"""Reads of the core app; `access_*` helpers fetch, authorize, and hide other tenants."""

from qim.queries.identity import Identity, identity_for_token

__all__ = ["Identity", "identity_for_token"]
