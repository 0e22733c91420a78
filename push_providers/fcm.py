"""(being built)"""

from __future__ import annotations

from qim.models import Device, PushTask
from push_providers.credentials import FcmCredentials


class FcmSender:
    name = "fcm"

    def send(self, task: PushTask, device: Device, credentials: FcmCredentials) -> None:
        raise NotImplementedError
