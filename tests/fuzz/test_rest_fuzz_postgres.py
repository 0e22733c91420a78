"""The REST fuzzer's tests again, on one node over PostgreSQL and Redis (PostgreSQL refuses a
NUL in text that SQLite stores)."""

from tests.fuzz.test_rest_fuzz import *  # noqa: F401,F403

BACKEND = "postgres"
