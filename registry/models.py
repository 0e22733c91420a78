"""The per-tenant custom message type registry (design §3, protocol.md §6)."""

from __future__ import annotations

from django.db import models

from qim.models import Tenant

DELIVERY_CLASSES = ["persistent", "ephemeral", "ephemeral_aggregate"]
ANCHOR_MODES = ["own_seq", "anchor_target", "none"]


class CustomMessageType(models.Model):
    """One type a tenant's clients may send: the server decides delivery from these fields and
    never parses payloads. `version` is the tenant's registry_version at the row's last change,
    so `?since_version=` finds what changed."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="message_types")
    custom_type = models.CharField(max_length=128)
    schema_version = models.PositiveIntegerField(default=1)
    delivery_class = models.CharField(max_length=24, choices=[(c, c) for c in DELIVERY_CLASSES], default="persistent")
    counts_unread = models.BooleanField(default=True)
    affects_session_order = models.BooleanField(default=True)
    timeline_visible = models.BooleanField(default=True)
    anchor_mode = models.CharField(max_length=16, choices=[(m, m) for m in ANCHOR_MODES], default="own_seq")
    preview_template = models.CharField(max_length=200, default="[message]")
    max_payload_bytes = models.PositiveIntegerField(default=4096)
    minimum_client_version = models.CharField(max_length=32, blank=True, default="")
    enabled = models.BooleanField(default=True)
    version = models.PositiveBigIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "custom_type"], name="custom_type_unique_per_tenant")
        ]
        ordering = ["tenant", "custom_type"]

    def __str__(self) -> str:
        return f"{self.custom_type} ({self.tenant})"

    @property
    def builtin(self) -> bool:
        return self.custom_type.startswith("qim.")


class CustomMessageTypeChange(models.Model):
    """Audit trail: who changed which type, what, when; written by the action, never edited."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    message_type = models.ForeignKey(CustomMessageType, on_delete=models.CASCADE, related_name="changes")
    registry_version = models.PositiveBigIntegerField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=16)
    changes = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-registry_version"]
