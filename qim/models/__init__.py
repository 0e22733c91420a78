"""Core models: tenants and accounts now; conversations and the mailbox join them here."""

from qim.models.accounts import Device, DeviceToken, Tenant, User, new_token_key

__all__ = ["Device", "DeviceToken", "Tenant", "User", "new_token_key"]
