"""Test settings: the embedded settings with a real PostgreSQL when one is reachable.

The database is ``OPENRATH_TEST_DATABASE_URL`` (default ``postgres://root@127.0.0.1:5432/test``;
Django creates ``test_<name>`` from it). Outside CI, an unreachable PostgreSQL falls back to
SQLite and the tests that need PostgreSQL skip, saying why; under ``CI=true`` it is an error.
``OPENRATH_TEST_DB=sqlite`` forces SQLite (to run the portable tests on the embedded engine, as
CI's second pass does); the tests that need PostgreSQL then skip, also under ``CI=true``.
"""

from __future__ import annotations

import os
import tempfile

CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
TEST_DATABASE_URL = os.environ.get(
    "OPENRATH_TEST_DATABASE_URL", "postgres://root@127.0.0.1:5432/test"
)
TEST_REDIS_URL = os.environ.get("OPENRATH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _postgres_reachable(url: str) -> str:
    """'' when reachable, otherwise the reason."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return ""


_data_dir = tempfile.mkdtemp(prefix="openrath-test-")
os.environ["OPENRATH_DATA_DIR"] = _data_dir
os.environ["OPENRATH_PROFILE"] = "embedded"
os.environ.pop("REDIS_URL", None)
os.environ.pop("S3_BUCKET", None)
os.environ.pop("MIGRATION_DATABASE_URL", None)

POSTGRES_UNAVAILABLE = ""
# Forced SQLite is a deliberate choice, not a missing service: the tests that need PostgreSQL skip
# then even under CI=true (tests.support.require_postgres).
SQLITE_FORCED = os.environ.get("OPENRATH_TEST_DB", "").strip().lower() == "sqlite"
if SQLITE_FORCED:
    POSTGRES_UNAVAILABLE = "OPENRATH_TEST_DB=sqlite forces SQLite"
    os.environ["DATABASE_URL"] = f"sqlite:///{_data_dir}/test.sqlite3"
else:
    POSTGRES_UNAVAILABLE = _postgres_reachable(TEST_DATABASE_URL)
    if POSTGRES_UNAVAILABLE and CI:
        raise RuntimeError(
            f"CI=true needs PostgreSQL at {TEST_DATABASE_URL}: {POSTGRES_UNAVAILABLE}"
        )
    os.environ["DATABASE_URL"] = (
        f"sqlite:///{_data_dir}/test.sqlite3" if POSTGRES_UNAVAILABLE else TEST_DATABASE_URL
    )

from openrath_project.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, as the embedded profile uses, not Django's default shared-cache in-memory test
    # database: there a second connection (a stream's database thread, a worker thread) gets
    # "database table is locked" at once, while a file in WAL mode waits on the busy timeout.
    DATABASES["default"]["TEST"] = {"NAME": f"{_data_dir}/test-db.sqlite3"}  # noqa: F405
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
