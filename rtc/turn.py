"""TURN credentials in the TURN REST API scheme (draft-uberti-behave-turn-rest), the one
coturn's `use-auth-secret` / `static-auth-secret` checks: a username that starts with its
expiry time and a password that is the HMAC of the shared secret over that username."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

from django.conf import settings

from qim.conf import limit


def turn_credential(secret: str, username: str) -> str:
    """base64(HMAC-SHA1(secret, username)): what coturn computes to check the password."""
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def get_ice_servers(tenant_name: str, user_id: str, clock: Callable[[], float] = time.time) -> dict:
    """`{ice_servers: [{urls, username, credential}], ttl_s}` for one user. The username is
    `<expiry unix s>:<tenant>:<user_id>` (timestamp first, coturn's default separator ":"), so
    coturn refuses it after the expiry and its logs name who relayed. Without QIM_TURN_SECRET
    or QIM_TURN_URLS there is nothing to hand out: an empty list (clients use host and STUN
    candidates only)."""
    ttl_s = int(limit("turn_ttl_s"))
    secret, urls = settings.QIM_TURN_SECRET, list(settings.QIM_TURN_URLS)
    if not secret or not urls:
        return {"ice_servers": [], "ttl_s": ttl_s}
    username = f"{int(clock()) + ttl_s}:{tenant_name}:{user_id}"
    server = {"urls": urls, "username": username, "credential": turn_credential(secret, username)}
    return {"ice_servers": [server], "ttl_s": ttl_s}
