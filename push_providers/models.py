"""A tenant's own push provider credentials; they win over the global ones from settings.

Secrets (the APNs .p8 key, the FCM service account, the VAPID private key) are write-only:
REST never returns them, the admin masks them, nothing logs them.
"""

from __future__ import annotations

from django.db import models

from qim.models import Tenant


class TenantPushConfig(models.Model):
    SANDBOX, PRODUCTION = "sandbox", "production"

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="push_config")
    # APNs token authentication: the .p8 key (PEM), its key id, the team id, the app's bundle
    # id (the alert topic; VoIP pushes go to "<bundle>.voip") and Apple's environment.
    apns_key_pem = models.TextField(blank=True)
    apns_key_id = models.CharField(max_length=32, blank=True)
    apns_team_id = models.CharField(max_length=32, blank=True)
    apns_bundle_id = models.CharField(max_length=255, blank=True)
    apns_environment = models.CharField(
        max_length=16, default=PRODUCTION, choices=[(PRODUCTION, "production"), (SANDBOX, "sandbox")]
    )
    # FCM HTTP v1: the service account JSON (its project_id names the FCM project).
    fcm_service_account_json = models.TextField(blank=True)
    # Web Push (VAPID): the P-256 private key as PEM, and the contact (mailto: or https:).
    vapid_private_key_pem = models.TextField(blank=True)
    vapid_subject = models.CharField(max_length=255, blank=True)
    updated_at_ms = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"push credentials of {self.tenant}"
