"""The push object: what the on-commit helper (qim/notify.py) hands the ConnectionNode
(qim/node/connection_node.py). Its own module so that both import it and neither imports the other's
caller."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class UserPush:
    """One frame for many users. `text` is the same for all; or each user's frame is
    `head + per_user[user_id] + tail` (mailbox events differ only in mailbox_seq), so the
    body is still encoded once.

    Device-level targeting, each a (user_id, device_id): `exclude_device` skips that device's
    connections (the sender's own); `only_device` reaches that device's connections and no
    other (an RTC_SIGNAL to the device in a call). `kind` names the push to the hooks
    registered with `on_push_delivered` on the nodes it reaches."""

    tenant_id: int
    user_ids: list[str]
    text: str | None = None
    head: str = ""
    tail: str = ""
    per_user: dict[str, str] = field(default_factory=dict)
    exclude_device: tuple[str, str] | None = None
    only_device: tuple[str, str] | None = None
    kind: str | None = None
    # When its transaction committed (time.time(): it travels to other nodes in the batch), for
    # qim_fanout_seconds.
    committed_at: float | None = None
