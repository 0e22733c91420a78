"""Tenants, their users, each user's devices, and the devices' tokens (stored as digests)."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.hashers import check_password, make_password
from django.db import models


class Tenant(models.Model):
    """A wall: every other row belongs to exactly one tenant and never crosses it."""

    name = models.SlugField(max_length=64, unique=True)
    # Grows on every change to the tenant's custom message registry (protocol.md §6).
    registry_version = models.PositiveBigIntegerField(default=0)
    # Messages older than this many seconds are deleted by `qim_retention` (qim/ops/retention.py);
    # 0 keeps them forever, the default.
    message_retention_s = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class User(models.Model):
    """An IM user of one tenant. Not Django's auth user: operators log into the admin with
    `auth.User`; these log in over REST and connect over WebSocket. `user_id` on the wire is
    the username, unique per tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="users")
    username = models.CharField(max_length=64)
    display_name = models.CharField(max_length=128, blank=True)
    password_hash = models.CharField(max_length=256)
    is_tenant_admin = models.BooleanField(default=False)
    # A deactivated user has no tokens and cannot get one (qim/actions/credentials.py).
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "username"], name="user_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.tenant_id}"

    # DRF treats request.user as authenticated when this is true.
    is_authenticated = True
    is_anonymous = False

    @property
    def user_id(self) -> str:
        return self.username

    def set_password(self, raw: str) -> None:
        self.password_hash = make_password(raw)

    def check_password(self, raw: str) -> bool:
        return check_password(raw, self.password_hash)


class Device(models.Model):
    """One client installation of a user; the unit of sync cursors and push credentials."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="devices")
    device_id = models.CharField(max_length=64)
    # Push credentials (POST devices/{device_id}/push); a device without them gets no PushTask.
    # push_platform is "ios", "android" or "web"; for "web", push_token holds the browser's
    # PushSubscription as canonical JSON (qim/push/web_subscription.py), hence its length.
    push_platform = models.CharField(max_length=16, blank=True)
    push_token = models.CharField(max_length=2048, blank=True)
    voip_token = models.CharField(max_length=512, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "device_id"], name="device_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user}/{self.device_id}"


def new_token_key() -> str:
    """A bearer token: 256 random bits, shown once to whoever logs in, never stored."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What the database keeps of a token: its SHA-256, hex.

    Plain SHA-256, not a slow password hash: the token is 256 random bits, so no guess list
    or brute force can invert the digest, and a look-up stays one index probe. Not an HMAC
    with the secret key either: that would log every device out when the key is rotated and
    tie the migration of old tokens to the key, for no gain against an attacker who cannot
    invert SHA-256 anyway.
    """
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceToken(models.Model):
    """One bearer token of a device: it authenticates AUTH (for that device only) and REST.

    Each login issues a new one (the plaintext cannot be shown twice); the newest
    MAX_TOKENS_PER_DEVICE of a device stay valid until revoked, expired or their user is
    deactivated.
    """

    MAX_TOKENS_PER_DEVICE = 10

    digest = models.CharField(max_length=64, primary_key=True)
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="tokens")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"token of {self.device}"
