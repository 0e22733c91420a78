"""Who may read /metrics (a node's and the push worker's): with QIM_METRICS_TOKEN set, only a
request carrying `Authorization: Bearer <token>`; unset, only a loopback client that did not
come through a proxy. Never a tenant's credentials: metrics span every tenant."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

# A reverse proxy on the same host connects from loopback: a request it forwarded carries one
# of these, and is a stranger's, not a local scraper's.
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


def is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_scraper(token: str, meta: Mapping[str, str]) -> Refusal | None:
    """None when the request (WSGI-style `meta`: REMOTE_ADDR, HTTP_*) may read metrics."""
    if token:
        scheme, _, given = meta.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return Refusal(401, "unauthenticated", "/metrics needs Authorization: Bearer <QIM_METRICS_TOKEN>")
    if is_loopback(meta.get("REMOTE_ADDR")) and not any(meta.get(h) for h in PROXY_HEADERS):
        return None
    return Refusal(
        403, "forbidden", "/metrics answers loopback clients only while QIM_METRICS_TOKEN is unset"
    )
