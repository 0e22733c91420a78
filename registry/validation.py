"""The registry's rules, in one place: the admin form and the API serializer both call
`check_type_fields`, so a rule cannot hold in one and not the other."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

from registry.models import ANCHOR_MODES, DELIVERY_CLASSES

CUSTOM_TYPE_RE = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+$")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,2}$")
PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")
# The server never reads payloads, so a template may name only what the server knows.
TEMPLATE_FIELDS = {"sender_id", "content_type"}
RESERVED_PREFIX = "qim."
RESERVED_NAMES = {"text"}
# What a tenant may change on a built-in qim.* type (protocol.md §6).
BUILTIN_EDITABLE = {"counts_unread", "preview_template"}
TYPE_FIELDS = [
    "schema_version", "delivery_class", "counts_unread", "affects_session_order",
    "timeline_visible", "anchor_mode", "preview_template", "max_payload_bytes",
    "minimum_client_version", "enabled",
]


def check_type_fields(
    values: dict[str, Any], *, existing: dict[str, Any] | None, creating_builtin: bool = False
) -> dict[str, str]:
    """Field -> message for every broken rule; empty when `values` may be saved.

    `values` is the whole row as it would be saved; `existing` the row as it is (None when
    creating). `creating_builtin` is for qim_bootstrap, the one writer of qim.* types.
    """
    errors: dict[str, str] = {}
    custom_type = values.get("custom_type") or ""
    if existing is None:
        if custom_type in RESERVED_NAMES:
            errors["custom_type"] = f"{custom_type!r} is built in"
        elif custom_type.startswith(RESERVED_PREFIX) and not creating_builtin:
            errors["custom_type"] = "the qim. prefix is reserved for built-in types"
        elif not CUSTOM_TYPE_RE.match(custom_type) or len(custom_type) > 128:
            errors["custom_type"] = "lower-case dotted name such as acme.poll.v1 (at most 128 characters)"
    elif custom_type != existing["custom_type"]:
        errors["custom_type"] = "custom_type cannot be renamed"
    if values.get("delivery_class") not in DELIVERY_CLASSES:
        errors["delivery_class"] = f"one of {', '.join(DELIVERY_CLASSES)}"
    if values.get("anchor_mode") not in ANCHOR_MODES:
        errors["anchor_mode"] = f"one of {', '.join(ANCHOR_MODES)}"
    ceiling = int(settings.QIM_LIMITS["max_custom_payload_bytes"])
    size = values.get("max_payload_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= ceiling:
        errors["max_payload_bytes"] = f"from 1 to {ceiling} (QIM_MAX_CUSTOM_PAYLOAD_BYTES)"
    version = values.get("minimum_client_version") or ""
    if version and not VERSION_RE.match(version):
        errors["minimum_client_version"] = "empty or a version such as 2 or 2.1 or 2.1.3"
    template = values.get("preview_template")
    unknown = {name for name in PLACEHOLDER_RE.findall(template or "")} - TEMPLATE_FIELDS
    if template is None or template.strip() == "" and values.get("delivery_class") == "persistent":
        errors["preview_template"] = "a persistent type needs a preview (clients show it when they cannot render)"
    elif unknown:
        errors["preview_template"] = f"unknown placeholder {{{sorted(unknown)[0]}}}; allowed: {{sender_id}}, {{content_type}}"
    if values.get("delivery_class") != "persistent":
        flags = [f for f in ("counts_unread", "affects_session_order", "timeline_visible") if values.get(f)]
        if flags:
            errors[flags[0]] = "only persistent types can count unread, reorder or show in the timeline"
    if existing is not None and custom_type.startswith(RESERVED_PREFIX) and not creating_builtin:
        changed = [f for f in TYPE_FIELDS if values.get(f) != existing.get(f) and f not in BUILTIN_EDITABLE]
        if changed:
            errors[changed[0]] = f"built-in types allow changing only {', '.join(sorted(BUILTIN_EDITABLE))}"
    return errors
