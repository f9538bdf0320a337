"""Profile rules: what the production profile demands of its environment. Pure Python.

``settings.py`` calls :func:`production_problems` with the raw environment and refuses to start
when it returns anything, listing every problem at once so an operator fixes them in one go.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

PROFILES = ("embedded", "production")

POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql", "postgis"}
REDIS_SCHEMES = {"redis", "rediss"}
REQUIRED_S3 = ("S3_BUCKET", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY")
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARS = 5
TRUTHY = {"1", "true", "yes", "on"}


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


def production_problems(env: Mapping[str, str]) -> list[str]:
    """Every reason the given environment is missing or unsafe for the production profile."""
    problems: list[str] = []

    database_url = env.get("DATABASE_URL", "").strip()
    if not database_url:
        problems.append("DATABASE_URL is required (a PostgreSQL URL for the runtime role)")
    elif _scheme(database_url) not in POSTGRES_SCHEMES:
        problems.append(
            f"DATABASE_URL must point to PostgreSQL; got scheme {_scheme(database_url)!r} "
            "(SQLite is for the embedded profile only)"
        )
    migration_url = env.get("MIGRATION_DATABASE_URL", "").strip()
    if migration_url and _scheme(migration_url) not in POSTGRES_SCHEMES:
        problems.append("MIGRATION_DATABASE_URL must point to PostgreSQL")

    redis_url = env.get("REDIS_URL", "").strip()
    if not redis_url:
        problems.append("REDIS_URL is required (Celery broker and channel layer)")
    elif _scheme(redis_url) not in REDIS_SCHEMES:
        problems.append(
            f"REDIS_URL must be a redis:// or rediss:// URL; got {_scheme(redis_url)!r}"
        )

    secret_key = env.get("SECRET_KEY", "")
    if not secret_key:
        problems.append("SECRET_KEY is required")
    elif (
        len(secret_key) < MIN_SECRET_KEY_LENGTH
        or len(set(secret_key)) < MIN_SECRET_KEY_UNIQUE_CHARS
        or secret_key.startswith("django-insecure-")
    ):
        problems.append(
            f"SECRET_KEY is unsafe: use at least {MIN_SECRET_KEY_LENGTH} random characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(64))')"
        )

    hosts = [h.strip() for h in env.get("ALLOWED_HOSTS", "").split(",") if h.strip()]
    if not hosts:
        problems.append("ALLOWED_HOSTS is required (comma-separated host names)")
    elif "*" in hosts:
        problems.append("ALLOWED_HOSTS must not contain '*'")

    missing_s3 = [name for name in REQUIRED_S3 if not env.get(name, "").strip()]
    if missing_s3:
        problems.append(
            f"S3 artifact storage settings are required: {', '.join(missing_s3)} "
            "(S3_ENDPOINT_URL too, unless the bucket is on AWS)"
        )

    if env.get("DEBUG", "").strip().lower() in TRUTHY:
        problems.append("DEBUG must be off in the production profile")
    return problems


def format_refusal(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return (
        "Refusing to start the production profile (OPENRATH_PROFILE=production):\n"
        f"{lines}\n"
        "See docs/operations.md, section 'Configuration'."
    )
