"""ProviderSender: the PushSender that picks APNs, FCM or Web Push by the device's platform.

A platform whose provider has no credentials for the task's tenant (neither the tenant's own
nor global ones) is logged like LogSender and counts as sent, so a server with no provider
configured behaves as before.
"""

from __future__ import annotations

import time

from qim.models import Device, PushTask
from qim.push.senders import LogSender, PushSendError
from push_providers.apns import ApnsSender
from push_providers.credentials import credentials_for
from push_providers.fcm import FcmSender
from push_providers.stats import ProviderCounters
from push_providers.webpush import WebPushSender

# Device.push_platform -> (provider name, attribute of TenantCredentials).
PROVIDER_OF_PLATFORM = {"ios": ("apns", "apns"), "android": ("fcm", "fcm"), "web": ("web", "vapid")}


class ProviderSender:
    def __init__(self) -> None:
        self.providers = {"apns": ApnsSender(), "fcm": FcmSender(), "web": WebPushSender()}
        self.fallback = LogSender()
        self.counters = ProviderCounters()

    def send(self, task: PushTask, device: Device) -> None:
        name, attribute = PROVIDER_OF_PLATFORM.get(device.push_platform, ("log", ""))
        credentials = getattr(credentials_for(task.tenant_id), attribute) if attribute else None
        started = time.monotonic()
        if credentials is None:
            self.fallback.send(task, device)
            self.counters.record("log", "sent", (time.monotonic() - started) * 1000)
            return
        try:
            self.providers[name].send(task, device, credentials)
        except PushSendError as exc:
            self.counters.record(name, "failed" if exc.permanent else "retried", (time.monotonic() - started) * 1000)
            raise
        except Exception:
            self.counters.record(name, "retried", (time.monotonic() - started) * 1000)
            raise
        self.counters.record(name, "sent", (time.monotonic() - started) * 1000)

    def report(self) -> dict[str, dict[str, float | int]]:
        return self.counters.report()
