"""Checking a browser's PushSubscription before the server ever fetches its endpoint.

The endpoint is a URL a client gives us and the push worker later POSTs to: without a check
it is a server-side request forgery door into the operator's network. Only https endpoints on
the hosts of QIM_WEB_PUSH_ENDPOINT_HOSTS pass (http too with QIM_WEB_PUSH_ALLOW_HTTP, for
local stand-ins in tests), and the keys must be what RFC 8291 needs: `p256dh` an uncompressed
P-256 point (65 bytes) and `auth` a 16-byte secret, both base64url.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import urlsplit

from django.conf import settings
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from qim.errors import Refused

ENDPOINT_MAX_CHARS = 1024
P256_POINT_BYTES = 65
AUTH_SECRET_BYTES = 16
HOST_CHARS = re.compile(r"[a-z0-9.:-]+")  # DNS names, IPv4, IPv6 (urlsplit drops its brackets)


def canonical_subscription(subscription: object) -> str:
    """The subscription as the compact JSON stored in Device.push_token, or `bad_request`."""
    if not isinstance(subscription, dict):
        raise Refused("bad_request", "subscription must be an object {endpoint, keys: {p256dh, auth}}")
    endpoint = subscription.get("endpoint")
    keys = subscription.get("keys")
    if not isinstance(endpoint, str) or not isinstance(keys, dict):
        raise Refused("bad_request", "subscription must be an object {endpoint, keys: {p256dh, auth}}")
    check_endpoint(endpoint)
    p256dh = _key(keys, "p256dh", P256_POINT_BYTES)
    auth = _key(keys, "auth", AUTH_SECRET_BYTES)
    if not p256dh.startswith("B"):  # 0x04: the uncompressed form, base64url-encoded
        raise Refused("bad_request", "subscription keys.p256dh is not an uncompressed P-256 point")
    return json.dumps({"endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": auth}}, separators=(",", ":"))


def check_endpoint(endpoint: str) -> None:
    """`bad_request` unless the endpoint is an allowed push service's URL."""
    if len(endpoint) > ENDPOINT_MAX_CHARS:
        raise Refused("bad_request", f"subscription endpoint is longer than {ENDPOINT_MAX_CHARS} characters")
    # urlsplit drops tabs and newlines that urllib3 then refuses: printable ASCII only, so
    # the URL checked here is the URL the worker fetches.
    if not endpoint.isascii() or not endpoint.isprintable() or " " in endpoint:
        raise Refused("bad_request", "subscription endpoint must be printable ASCII without spaces")
    try:
        parts = urlsplit(endpoint)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise Refused("bad_request", "subscription endpoint is not a URL") from None
    schemes = {"https", "http"} if settings.QIM_WEB_PUSH_ALLOW_HTTP else {"https"}
    if parts.scheme not in schemes:
        raise Refused("bad_request", "subscription endpoint must be an https URL")
    if parts.username or parts.password or not host:
        raise Refused("bad_request", "subscription endpoint must be a plain https URL of a push service")
    # The host the worker's HTTP client (urllib3) will connect to must be the one checked
    # here: `https://10.0.0.7\.push.apple.com/` is host "10.0.0.7\.push.apple.com" to urlsplit
    # (allowed by *.push.apple.com) but 10.0.0.7 to urllib3. Hostname characters only, and
    # both parsers agreeing.
    if not HOST_CHARS.fullmatch(host) or _urllib3_host(endpoint) != host:
        raise Refused("bad_request", "subscription endpoint host is not a plain host name")
    if not any(host_matches(host, pattern) for pattern in settings.QIM_WEB_PUSH_ENDPOINT_HOSTS):
        raise Refused("bad_request", f"subscription endpoint host {host!r} is not an allowed push service")


def _urllib3_host(endpoint: str) -> str | None:
    try:
        host = parse_url(endpoint).host
    except LocationParseError:
        return None
    return (host or "").lower().strip("[]")


def host_matches(host: str, pattern: str) -> bool:
    """`*.example.com` matches any subdomain of example.com (not example.com itself)."""
    pattern = pattern.strip().lower()
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def parse_subscription(stored: str) -> dict:
    """The subscription stored by canonical_subscription."""
    return json.loads(stored)


def _key(keys: dict, name: str, size: int) -> str:
    value = keys.get(name)
    if not isinstance(value, str) or not value:
        raise Refused("bad_request", f"subscription keys.{name} is missing")
    value = value.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise Refused("bad_request", f"subscription keys.{name} is not base64url") from None
    if len(raw) != size:
        raise Refused("bad_request", f"subscription keys.{name} must be {size} bytes")
    return value
