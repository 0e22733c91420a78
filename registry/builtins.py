"""The built-in qim.* rows every tenant gets from qim_bootstrap, from the core's policies."""

from __future__ import annotations

from qim.conf import limit
from qim.content_types import BUILTIN_POLICIES, TEXT

BUILTIN_SCHEMA = {
    "schema_version": 1,
    "minimum_client_version": "",
    "enabled": True,
}


def builtin_rows() -> dict[str, dict]:
    """custom_type -> the fields its registry row starts with."""
    rows = {}
    for name, policy in BUILTIN_POLICIES.items():
        if name == TEXT:
            continue
        rows[name] = {
            **BUILTIN_SCHEMA,
            "delivery_class": policy.delivery_class,
            "counts_unread": policy.counts_unread,
            "affects_session_order": policy.affects_session_order,
            "timeline_visible": policy.timeline_visible,
            "anchor_mode": policy.anchor_mode,
            "preview_template": policy.preview_template or "[event]",
            "max_payload_bytes": min(4096, int(limit("max_custom_payload_bytes"))),
        }
    return rows
