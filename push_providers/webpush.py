"""(being built)"""

from __future__ import annotations

from qim.models import Device, PushTask
from push_providers.credentials import VapidCredentials


class WebPushSender:
    name = "webpush"

    def send(self, task: PushTask, device: Device, credentials: VapidCredentials) -> None:
        raise NotImplementedError
