"""The requests Session provider calls share in one worker process: kept-alive connections,
and TLS that trusts QIM_PUSH_CA_FILE beside the CAs requests would use anyway."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import certifi
import requests
from django.conf import settings

_lock = threading.Lock()
_bundles: dict[str, str] = {}


class ProviderSession(requests.Session):
    """A Session that follows no redirect (the SSRF allow-list checked the endpoint, not where
    it points to), and whose own `verify` wins over REQUESTS_CA_BUNDLE: plain requests lets
    that variable replace a session's CA file, so QIM_PUSH_CA_FILE would be ignored wherever
    it is set (Debian images set it). Proxies from the environment still apply."""

    def request(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def]
        # A push endpoint passed the allow-list; where it redirects did not: never follow.
        kwargs["allow_redirects"] = False
        return super().request(method, url, *args, **kwargs)

    def merge_environment_settings(self, url, proxies, stream, verify, cert):  # type: ignore[no-untyped-def]
        return super().merge_environment_settings(url, proxies, stream, self.verify if verify is None else verify, cert)


def provider_session() -> requests.Session:
    """A new Session (one per sender, so per process) with the CA bundle in force."""
    session = ProviderSession()
    session.verify = ca_bundle()
    return session


def ca_bundle() -> str | bool:
    """The CA file to verify with: the usual CAs (REQUESTS_CA_BUNDLE's, else certifi's) plus
    QIM_PUSH_CA_FILE's, written once per process to a temporary file (requests takes one
    path); True (requests' default) when the setting is empty."""
    extra = settings.QIM_PUSH_CA_FILE
    if not extra:
        return True
    with _lock:
        if extra not in _bundles:
            usual = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
            combined = Path(usual).read_text() + "\n" + Path(extra).read_text()
            with tempfile.NamedTemporaryFile("w", prefix="qim-push-ca-", suffix=".pem", delete=False) as bundle:
                bundle.write(combined)
            _bundles[extra] = bundle.name
        return _bundles[extra]
