"""(being built)"""

from __future__ import annotations

from qim.models import Device, PushTask
from push_providers.credentials import ApnsCredentials


class ApnsSender:
    name = "apns"

    def send(self, task: PushTask, device: Device, credentials: ApnsCredentials) -> None:
        raise NotImplementedError
