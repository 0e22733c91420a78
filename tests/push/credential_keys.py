"""Keys and credentials for the push credentials tests: made fresh, never real ones."""

from __future__ import annotations

import base64
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def pem(key) -> str:  # type: ignore[no-untyped-def]
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def p256_pem() -> str:
    return pem(ec.generate_private_key(ec.SECP256R1()))


def rsa_pem() -> str:
    return pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def pem_body_lines(key_pem: str) -> list[str]:
    """The base64 lines of a PEM: none of them may ever appear in an answer, a page or a log."""
    return [line for line in key_pem.splitlines() if line and not line.startswith("-----")]


def public_point_b64url(key_pem: str) -> str:
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return base64.urlsafe_b64encode(point).rstrip(b"=").decode()


def raw_scalar_b64url(key_pem: str) -> str:
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    return base64.urlsafe_b64encode(key.private_numbers().private_value.to_bytes(32, "big")).rstrip(b"=").decode()


def one_line(key_pem: str) -> str:
    """A PEM as a browser's password field leaves it: line breaks gone."""
    return key_pem.replace("\r", "").replace("\n", "")


def service_account(private_key: str | None = None, **changes: object) -> dict:
    account = {
        "type": "service_account",
        "project_id": "qim-push-test",
        "private_key_id": os.urandom(8).hex(),
        "private_key": private_key or rsa_pem(),
        "client_email": "push@qim-push-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    return {**account, **changes}


def apns_values(key_pem: str | None = None, **changes: object) -> dict:
    values = {"key_pem": key_pem or p256_pem(), "key_id": "ABC123DEFG", "team_id": "TEAM123456",
              "bundle_id": "com.example.qim", "environment": "sandbox"}
    return {**values, **changes}
