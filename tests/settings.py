"""Settings for in-process tests: the product's settings with test-speed defaults."""

import os

# Hundreds of users per run: PBKDF2 at production strength would take minutes.
os.environ.setdefault("QIM_PASSWORD_HASHERS", "django.contrib.auth.hashers.MD5PasswordHasher")
os.environ.setdefault("QIM_SECRET_KEY", "test-secret-key-not-for-production")
# Tenant ids come back after a test's rollback: a cached tenant's push credentials would leak
# into the next test (push_providers/credentials.py; tests of the cache set it themselves).
os.environ.setdefault("QIM_PUSH_CREDENTIALS_CACHE_S", "0")

from qim.settings import *  # noqa: E402,F401,F403

# In-process tests render admin pages without a collectstatic run: plain (unhashed) storage.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
# ... and serve none: whitenoise would warn, in every test, that STATIC_ROOT does not exist.
MIDDLEWARE = [m for m in MIDDLEWARE if m != "whitenoise.middleware.WhiteNoiseMiddleware"]  # noqa: F405
