"""The requests Session provider calls share in one worker process: kept-alive connections,
and TLS that trusts QIM_PUSH_CA_FILE beside the usual public CAs."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import certifi
import requests
from django.conf import settings

_lock = threading.Lock()
_bundles: dict[str, str] = {}


def provider_session() -> requests.Session:
    """A new Session (one per sender, so per process) with the CA bundle in force."""
    session = requests.Session()
    session.verify = ca_bundle()
    return session


def ca_bundle() -> str | bool:
    """The CA file to verify with: certifi's public CAs plus QIM_PUSH_CA_FILE's, written once
    per process to a temporary file (requests takes one path); True (certifi alone) when the
    setting is empty."""
    extra = settings.QIM_PUSH_CA_FILE
    if not extra:
        return True
    with _lock:
        if extra not in _bundles:
            combined = Path(certifi.where()).read_text() + "\n" + Path(extra).read_text()
            with tempfile.NamedTemporaryFile("w", prefix="qim-push-ca-", suffix=".pem", delete=False) as bundle:
                bundle.write(combined)
            _bundles[extra] = bundle.name
        return _bundles[extra]
