"""The frame fuzzer's tests again, on one node over PostgreSQL and Redis: PostgreSQL refuses
what SQLite stores without complaint (a NUL in text, an integer past 64 bits), so a frame
that slips through validation fails differently there."""

from tests.fuzz.test_frame_fuzz import *  # noqa: F401,F403

BACKEND = "postgres"
