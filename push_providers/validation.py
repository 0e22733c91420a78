"""Checking a tenant's provider credentials before they are stored, so a bad key is refused at
the door (400 bad_request) instead of failing every push later.

Messages never quote a secret: a key that does not parse says so, never what it was.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import urlsplit

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings

from qim.errors import Refused
from qim.push.web_subscription import host_matches
from push_providers.credentials import vapid_key_pem

PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z ]+)-----(.*?)-----END \1-----", re.DOTALL)
# Apple's key and team ids are 10 characters; the bundle id is reverse DNS.
APPLE_ID = re.compile(r"^[A-Z0-9]{10}$")
BUNDLE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,254}$")
# Google project ids (optionally domain-scoped): they go into the FCM URL's path.
PROJECT_ID = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
SERVICE_ACCOUNT_FIELDS = ("type", "project_id", "private_key_id", "private_key", "client_email", "client_id", "token_uri")
MAX_SUBJECT_CHARS = 255


def load_private_key(text: str, what: str):  # type: ignore[no-untyped-def]
    """A private key from PEM (line breaks optional: a password field drops them) or from
    base64 DER; `bad_request` naming `what` if it does not parse."""
    text = text.strip()
    match = PEM_BLOCK.search(text)
    body = match.group(2) if match else text
    try:
        der = base64.b64decode(re.sub(r"\s+", "", body), validate=True)
        return serialization.load_der_private_key(der, password=None)
    except (binascii.Error, ValueError, TypeError, UnsupportedAlgorithm):
        raise Refused("bad_request", f"{what} is not a PEM private key without a password") from None


def pkcs8_pem(key) -> str:  # type: ignore[no-untyped-def]
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def check_apns(values: dict) -> dict:
    """APNs token authentication: the .p8 key must be a P-256 key (ES256); answers the values
    to store, the key as PKCS#8 PEM."""
    key_pem = check_apns_key(values["key_pem"])
    for name in ("key_id", "team_id", "bundle_id"):
        check_apns_id(name, values[name])
    return {**values, "key_pem": key_pem}


def check_apns_key(key_pem: str) -> str:
    key = load_private_key(key_pem, "key_pem")
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise Refused("bad_request", "key_pem must be a P-256 (ES256) key, as Apple's .p8 keys are")
    return pkcs8_pem(key)


def check_apns_id(name: str, value: str) -> str:
    """key_id and team_id: Apple's 10-character ids; bundle_id: reverse DNS."""
    if name == "bundle_id":
        if not BUNDLE_ID.match(value):
            raise Refused("bad_request", "bundle_id must be the app's bundle id (letters, digits, dots, hyphens)")
    elif not APPLE_ID.match(value):
        raise Refused("bad_request", f"{name} must be Apple's 10-character id (A-Z, 0-9)")
    return value


def parse_json(text: str) -> object:
    """The admin's service account field: JSON text, or `bad_request` (never quoting it)."""
    try:
        return json.loads(text)
    except ValueError:
        raise Refused("bad_request", "service_account is not valid JSON") from None


def check_service_account(account: object) -> str:
    """An FCM service account (the JSON Google issues) as the compact JSON to store, with only
    the fields a token request needs."""
    if not isinstance(account, dict):
        raise Refused("bad_request", "service_account must be the JSON object of a Google service account")
    if account.get("type") != "service_account":
        raise Refused("bad_request", "service_account.type must be \"service_account\"")
    for name in ("project_id", "client_email", "private_key", "token_uri"):
        if not isinstance(account.get(name), str) or not account[name]:
            raise Refused("bad_request", f"service_account.{name} is missing")
    if not PROJECT_ID.match(account["project_id"]):
        raise Refused("bad_request", "service_account.project_id is not a Google project id")
    if not EMAIL.match(account["client_email"]):
        raise Refused("bad_request", "service_account.client_email is not an email address")
    key = load_private_key(account["private_key"], "service_account.private_key")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise Refused("bad_request", "service_account.private_key must be an RSA key")
    check_token_uri(account["token_uri"])
    kept = {name: account[name] for name in SERVICE_ACCOUNT_FIELDS if isinstance(account.get(name), str)}
    return json.dumps({**kept, "private_key": pkcs8_pem(key)}, separators=(",", ":"), sort_keys=True)


def check_token_uri(uri: str) -> None:
    """The server POSTs a signed assertion to the token_uri: only https on Google's token host
    (QIM_FCM_TOKEN_URI_HOSTS), plain http only with the test-only QIM_PUSH_ALLOW_HTTP_PROVIDERS."""
    try:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise Refused("bad_request", "service_account.token_uri is not a URL") from None
    schemes = {"https", "http"} if settings.QIM_PUSH_ALLOW_HTTP_PROVIDERS else {"https"}
    if parts.scheme not in schemes or parts.username or parts.password or not host:
        raise Refused("bad_request", "service_account.token_uri must be a plain https URL")
    if not any(host_matches(host, pattern) for pattern in settings.QIM_FCM_TOKEN_URI_HOSTS):
        raise Refused("bad_request", f"service_account.token_uri host {host!r} is not an allowed token endpoint")


def check_vapid_key(value: str) -> str:
    """A VAPID private key (PEM, or base64url of the raw scalar or DER) as PKCS#8 PEM."""
    try:
        if "-----BEGIN" in value:  # PEM, maybe with its line breaks lost in a password field
            return vapid_key_pem(pkcs8_pem(load_private_key(value, "private_key")))
        return vapid_key_pem(value)
    except (binascii.Error, ValueError, TypeError, AttributeError, UnsupportedAlgorithm):
        raise Refused("bad_request", "private_key must be a P-256 private key, PEM or base64url") from None


def check_subject(subject: str) -> str:
    """RFC 8292 §2.1: the contact is a mailto: or an https: URL."""
    subject = subject.strip()
    if len(subject) > MAX_SUBJECT_CHARS:
        raise Refused("bad_request", f"subject is longer than {MAX_SUBJECT_CHARS} characters")
    if re.match(r"^mailto:[^@\s]+@[^@\s]+$", subject) or re.match(r"^https://[^\s/]+", subject):
        return subject
    raise Refused("bad_request", "subject must be a mailto: address or an https: URL")
