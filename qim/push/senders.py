"""The PushSender contract, the default LogSender, and loading the configured one."""

from __future__ import annotations

import json
import logging
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from qim.models import Device, PushTask

logger = logging.getLogger(__name__)


class PushSendError(Exception):
    """A send that did not go out, and what the provider's answer means for the outbox.

    `permanent`: retrying cannot help (a payload the provider refuses); the task fails at once.
    `rejected_token`: the provider says this token (or Web Push subscription) is unregistered
    or invalid; the worker clears it from the device, if it still holds it, and fails the task.
    `retry_after_s`: the provider asked us to wait (429 or 503 with Retry-After); the retry is
    due no earlier than that, even when the backoff would be sooner.
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        rejected_token: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent or bool(rejected_token)
        self.rejected_token = rejected_token
        self.retry_after_s = retry_after_s


class PushSender(Protocol):
    """One push provider (APNs, FCM, a vendor gateway...) behind one call.

    `send` returns once the provider accepted the push and raises on failure: PushSendError
    to say whether to retry, any other exception counts as a transient failure. The worker
    calls it outside any transaction, at most once per claim; it must give up well within
    half the claim lease (QIM_PUSH_LEASE_S / 2), or another worker may send the task again.
    `task.attempts` is the number of earlier tries; `device` carries the current credentials
    (push_platform, push_token, voip_token), at least one token being non-empty.
    """

    def send(self, task: PushTask, device: Device) -> None: ...


class LogSender:
    """Default for development and the embedded setup: one log line per push, nothing sent."""

    def send(self, task: PushTask, device: Device) -> None:
        logger.info(
            "push tenant=%s user=%s device=%s platform=%s kind=%s payload=%s",
            task.tenant.name,
            task.user.username,
            device.device_id,
            device.push_platform or "-",
            task.kind,
            json.dumps(task.payload, sort_keys=True, separators=(",", ":")),
        )


def request_timeout_s() -> float:
    """How long one provider request may take: QIM_PUSH_REQUEST_TIMEOUT_S, but never past
    40 % of the claim lease, so a send always ends within the half lease it started in."""
    return min(settings.QIM_PUSH_REQUEST_TIMEOUT_S, settings.QIM_PUSH_LEASE_S * 0.4)


def load_sender() -> PushSender:
    """An instance of the class named by settings.QIM_PUSH_SENDER (a dotted path)."""
    return import_string(settings.QIM_PUSH_SENDER)()
