"""The offline push outbox and its providers (APNs, FCM, Web Push): docs/operations.md §2.4, §3.3."""

from __future__ import annotations

from qim.settings.environment import env

# The offline push outbox (qim_push_worker): who sends, how often a task is tried, how long
# a worker's claim on a task lasts before another worker may take it over.
# The default dispatches by device platform to APNs, FCM or Web Push when that provider is
# configured (globally or for the task's tenant) and logs the push like LogSender when not.
QIM_PUSH_SENDER = env.str("QIM_PUSH_SENDER", default="push_providers.dispatch.ProviderSender")
QIM_PUSH_MAX_ATTEMPTS = env.int("QIM_PUSH_MAX_ATTEMPTS", default=8)
QIM_PUSH_LEASE_S = env.float("QIM_PUSH_LEASE_S", default=30.0)
QIM_PUSH_RETRY_BASE_S = env.float("QIM_PUSH_RETRY_BASE_S", default=2.0)
# One provider request's time limit; qim.push.senders.request_timeout_s caps it at 40 % of
# the lease so a send never outlives the half lease it started in.
QIM_PUSH_REQUEST_TIMEOUT_S = env.float("QIM_PUSH_REQUEST_TIMEOUT_S", default=10.0)
# Extra CA certificates (a PEM file) trusted for provider connections, beside the system's:
# a corporate TLS proxy, or the tests' local provider stand-ins.
QIM_PUSH_CA_FILE = env.str("QIM_PUSH_CA_FILE", default="")
# Global provider credentials (push_providers/credentials.py); a tenant's own, set in the
# admin or over REST, win over these. Unset means that provider is not configured.
QIM_APNS_KEY_FILE = env.str("QIM_APNS_KEY_FILE", default="")  # the .p8 key (PEM)
QIM_APNS_KEY_ID = env.str("QIM_APNS_KEY_ID", default="")
QIM_APNS_TEAM_ID = env.str("QIM_APNS_TEAM_ID", default="")
QIM_APNS_BUNDLE_ID = env.str("QIM_APNS_BUNDLE_ID", default="")
QIM_APNS_ENVIRONMENT = env.str("QIM_APNS_ENVIRONMENT", default="production")  # or "sandbox"
# Where APNs requests go; empty means Apple's host for the credential's environment.
QIM_APNS_ENDPOINT = env.str("QIM_APNS_ENDPOINT", default="")
QIM_FCM_SERVICE_ACCOUNT_FILE = env.str("QIM_FCM_SERVICE_ACCOUNT_FILE", default="")
QIM_FCM_ENDPOINT = env.str("QIM_FCM_ENDPOINT", default="https://fcm.googleapis.com")
# Web Push (RFC 8292 VAPID): the P-256 private key as PEM or base64url, and the contact.
QIM_VAPID_PRIVATE_KEY = env.str("QIM_VAPID_PRIVATE_KEY", default="")
QIM_VAPID_SUBJECT = env.str("QIM_VAPID_SUBJECT", default="")
# Web Push endpoints the server will fetch (an SSRF door otherwise): https only, and a host
# matching one of these (`*.` matches any subdomain). The browsers' push services by default.
QIM_WEB_PUSH_ENDPOINT_HOSTS = env.list(
    "QIM_WEB_PUSH_ENDPOINT_HOSTS",
    default=[
        "fcm.googleapis.com",
        "updates.push.services.mozilla.com",
        "*.notify.windows.com",
        "web.push.apple.com",
        "*.push.apple.com",
    ],
)
# Tests only: let Web Push endpoints be plain http (a local stand-in).
QIM_WEB_PUSH_ALLOW_HTTP = env.bool("QIM_WEB_PUSH_ALLOW_HTTP", default=False)
# Hosts a tenant's FCM service account may name as its token_uri (the server POSTs a signed
# assertion there: an SSRF door otherwise); https only. Global service accounts are the
# operator's own file and are not checked.
QIM_FCM_TOKEN_URI_HOSTS = env.list("QIM_FCM_TOKEN_URI_HOSTS", default=["oauth2.googleapis.com"])
# Tests only: let a tenant's provider URLs (the FCM token_uri) be plain http (a local stand-in).
QIM_PUSH_ALLOW_HTTP_PROVIDERS = env.bool("QIM_PUSH_ALLOW_HTTP_PROVIDERS", default=False)
# How long one process reuses a tenant's resolved credentials (push_providers/credentials.py);
# a change made over REST or in the admin reaches running workers within this. 0: no cache.
QIM_PUSH_CREDENTIALS_CACHE_S = env.float("QIM_PUSH_CREDENTIALS_CACHE_S", default=5.0)
# How often a worker in forever mode logs its per-provider counters (one INFO line of JSON).
QIM_PUSH_STATS_INTERVAL_S = env.float("QIM_PUSH_STATS_INTERVAL_S", default=60.0)
# How long a finished (sent or failed) task stays in the outbox for operators before a worker
# deletes it; 0 keeps every task forever.
QIM_PUSH_TASK_RETENTION_S = env.float("QIM_PUSH_TASK_RETENTION_S", default=7 * 24 * 3600.0)
