"""Which credentials a push uses: the tenant's own (TenantPushConfig) when complete, else the
global ones from settings, else none (that provider is not configured for the tenant)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings

from qim.errors import Refused
from push_providers.models import TenantPushConfig


@dataclass(frozen=True)
class ApnsCredentials:
    key_pem: str = field(repr=False)  # the .p8 signing key (ES256), PEM; never in a repr
    key_id: str
    team_id: str
    bundle_id: str
    environment: str  # "production" or "sandbox"


@dataclass(frozen=True)
class FcmCredentials:
    service_account: dict = field(repr=False)  # the JSON Google issues; project_id, client_email, private_key, token_uri

    @property
    def project_id(self) -> str:
        return self.service_account["project_id"]


@dataclass(frozen=True)
class VapidCredentials:
    private_key_pem: str = field(repr=False)  # P-256, PEM (PKCS#8)
    subject: str  # mailto: or https:

    def public_key_b64url(self) -> str:
        """The uncompressed public point, base64url without padding: applicationServerKey."""
        return public_key_b64url(self.private_key_pem)


@dataclass(frozen=True)
class TenantCredentials:
    apns: ApnsCredentials | None
    fcm: FcmCredentials | None
    vapid: VapidCredentials | None


class CredentialsCache:
    """Resolved credentials per tenant for QIM_PUSH_CREDENTIALS_CACHE_S, so a worker does not
    read the tenant's row and parse keys for every push. A change made in this process
    (REST, admin) forgets the tenant at once; other processes see it within the TTL."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.entries: dict[int, tuple[float, TenantCredentials]] = {}
        self.lock = threading.Lock()

    def get(self, tenant_id: int, resolve: Callable[[int], TenantCredentials]) -> TenantCredentials:
        ttl = settings.QIM_PUSH_CREDENTIALS_CACHE_S
        if ttl <= 0:
            return resolve(tenant_id)
        now = self.clock()
        with self.lock:
            hit = self.entries.get(tenant_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        resolved = resolve(tenant_id)
        with self.lock:
            self.entries[tenant_id] = (now + ttl, resolved)
        return resolved

    def forget(self, tenant_id: int | None = None) -> None:
        with self.lock:
            if tenant_id is None:
                self.entries.clear()
            else:
                self.entries.pop(tenant_id, None)


cache = CredentialsCache()


def credentials_for(tenant_id: int) -> TenantCredentials:
    """Each provider's credentials for one tenant: the tenant's own when complete, else the
    global ones, else None (cached for QIM_PUSH_CREDENTIALS_CACHE_S)."""
    return cache.get(tenant_id, resolve_credentials)


def resolve_credentials(tenant_id: int) -> TenantCredentials:
    config = TenantPushConfig.objects.filter(tenant_id=tenant_id).first()
    return TenantCredentials(
        apns=tenant_apns(config) or global_apns(),
        fcm=tenant_fcm(config) or global_fcm(),
        vapid=tenant_vapid(config) or global_vapid(),
    )


def tenant_apns(config: TenantPushConfig | None) -> ApnsCredentials | None:
    if config is None or not (config.apns_key_pem and config.apns_key_id and config.apns_team_id and config.apns_bundle_id):
        return None
    return ApnsCredentials(
        config.apns_key_pem, config.apns_key_id, config.apns_team_id, config.apns_bundle_id, config.apns_environment
    )


def tenant_fcm(config: TenantPushConfig | None) -> FcmCredentials | None:
    if config is None or not config.fcm_service_account_json:
        return None
    return FcmCredentials(json.loads(config.fcm_service_account_json))


def tenant_vapid(config: TenantPushConfig | None) -> VapidCredentials | None:
    if config is None or not config.vapid_private_key_pem:
        return None
    return VapidCredentials(config.vapid_private_key_pem, config.vapid_subject or settings.QIM_VAPID_SUBJECT)


def global_apns() -> ApnsCredentials | None:
    if not (settings.QIM_APNS_KEY_FILE and settings.QIM_APNS_KEY_ID and settings.QIM_APNS_TEAM_ID and settings.QIM_APNS_BUNDLE_ID):
        return None
    return ApnsCredentials(
        _read_setting_file("QIM_APNS_KEY_FILE"),
        settings.QIM_APNS_KEY_ID,
        settings.QIM_APNS_TEAM_ID,
        settings.QIM_APNS_BUNDLE_ID,
        settings.QIM_APNS_ENVIRONMENT,
    )


def global_fcm() -> FcmCredentials | None:
    if not settings.QIM_FCM_SERVICE_ACCOUNT_FILE:
        return None
    try:
        return FcmCredentials(json.loads(_read_setting_file("QIM_FCM_SERVICE_ACCOUNT_FILE")))
    except ValueError:
        raise _misconfigured("QIM_FCM_SERVICE_ACCOUNT_FILE", "is not JSON") from None


def global_vapid() -> VapidCredentials | None:
    if not settings.QIM_VAPID_PRIVATE_KEY:
        return None
    try:
        return VapidCredentials(vapid_key_pem(settings.QIM_VAPID_PRIVATE_KEY), settings.QIM_VAPID_SUBJECT)
    except (ValueError, TypeError):
        raise _misconfigured("QIM_VAPID_PRIVATE_KEY", "is not a P-256 private key") from None


def _read_setting_file(name: str) -> str:
    try:
        return Path(getattr(settings, name)).read_text()
    except (OSError, UnicodeDecodeError):
        raise _misconfigured(name, "names a file that cannot be read") from None


def _misconfigured(name: str, why: str) -> Refused:
    """A global credential the operator set wrongly: REST answers 503 `unavailable` naming the
    setting (never its value), and the worker retries the push until it is fixed."""
    return Refused("unavailable", f"the server's {name} {why}; the operator must fix it")


def vapid_key_pem(value: str) -> str:
    """A P-256 private key given as PEM, or as base64url of the raw 32-byte scalar or of DER,
    as PKCS#8 PEM."""
    value = value.strip()
    if value.startswith("-----BEGIN"):
        key = serialization.load_pem_private_key(value.encode(), password=None)
    else:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        if len(raw) == 32:
            key = ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
        else:
            key = serialization.load_der_private_key(raw, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("a VAPID key must be a P-256 (secp256r1) private key")
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def new_vapid_key_pem() -> str:
    """A fresh P-256 private key, PKCS#8 PEM."""
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def public_key_b64url(private_key_pem: str) -> str:
    key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return base64.urlsafe_b64encode(point).rstrip(b"=").decode()
