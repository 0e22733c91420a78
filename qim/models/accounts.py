"""Tenants, their users, each user's devices, and one token per (user, device)."""

from __future__ import annotations

import secrets

from django.contrib.auth.hashers import check_password, make_password
from django.db import models


class Tenant(models.Model):
    """A wall: every other row belongs to exactly one tenant and never crosses it."""

    name = models.SlugField(max_length=64, unique=True)
    # Grows on every change to the tenant's custom message registry (protocol.md §6).
    registry_version = models.PositiveBigIntegerField(default=0)
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
    push_platform = models.CharField(max_length=16, blank=True)
    push_token = models.CharField(max_length=512, blank=True)
    voip_token = models.CharField(max_length=512, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "device_id"], name="device_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user}/{self.device_id}"


def new_token_key() -> str:
    return secrets.token_hex(20)


class DeviceToken(models.Model):
    """The bearer token of one device: it authenticates AUTH (for that device only) and REST."""

    key = models.CharField(max_length=40, primary_key=True, default=new_token_key)
    device = models.OneToOneField(Device, on_delete=models.CASCADE, related_name="token")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"token of {self.device}"
