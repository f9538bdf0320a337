"""Profiles: the production profile refuses missing or unsafe settings with a readable message."""

from __future__ import annotations

import pytest

from openrath_project.profiles import format_refusal, production_problems
from tests.support import run_manage

GOOD = {
    "DATABASE_URL": "postgres://openrath@db.internal:5432/openrath",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "SECRET_KEY": "k3y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP",
    "ALLOWED_HOSTS": "openrath.example.com",
    "S3_BUCKET": "artifacts",
    "S3_ACCESS_KEY_ID": "id",
    "S3_SECRET_ACCESS_KEY": "secret",
    "S3_ENDPOINT_URL": "http://s3.internal:8333",
}


def test_good_environment_has_no_problems():
    assert production_problems(GOOD) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"DATABASE_URL": ""}, "DATABASE_URL is required"),
        ({"DATABASE_URL": "sqlite:////tmp/x.sqlite3"}, "must point to PostgreSQL"),
        ({"REDIS_URL": ""}, "REDIS_URL is required"),
        ({"REDIS_URL": "memcached://x"}, "REDIS_URL must be"),
        ({"SECRET_KEY": ""}, "SECRET_KEY is required"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is unsafe"),
        ({"SECRET_KEY": "django-insecure-" + "x1y2z3" * 10}, "SECRET_KEY is unsafe"),
        ({"SECRET_KEY": "a" * 80}, "SECRET_KEY is unsafe"),
        ({"ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS is required"),
        ({"ALLOWED_HOSTS": "*"}, "must not contain '*'"),
        ({"S3_BUCKET": ""}, "S3_BUCKET"),
        ({"DEBUG": "true"}, "DEBUG must be off"),
        ({"MIGRATION_DATABASE_URL": "mysql://x"}, "MIGRATION_DATABASE_URL must point"),
    ],
)
def test_each_problem_is_named(change, expected):
    problems = production_problems({**GOOD, **change})
    assert len(problems) == 1
    assert expected in problems[0]


def test_all_problems_at_once():
    problems = production_problems({})
    assert len(problems) == 5
    text = format_refusal(problems)
    assert text.startswith("Refusing to start the production profile")
    assert "docs/operations.md" in text


def _production_env(tmp_path, **overrides):
    env = {**GOOD, "OPENRATH_PROFILE": "production", "OPENRATH_DATA_DIR": str(tmp_path)}
    env.update(overrides)
    return env


def test_process_refuses_sqlite(tmp_path):
    result = run_manage("check", env=_production_env(tmp_path, DATABASE_URL="sqlite:///x.db"))
    assert result.returncode != 0
    assert "Refusing to start the production profile" in result.stderr
    assert "must point to PostgreSQL" in result.stderr


def test_process_refuses_missing_secrets(tmp_path):
    env = _production_env(tmp_path, SECRET_KEY="", S3_SECRET_ACCESS_KEY="")
    result = run_manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr
    assert "S3_SECRET_ACCESS_KEY" in result.stderr


def test_check_deploy_is_clean(tmp_path):
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING", env=_production_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_unknown_profile_is_refused(tmp_path):
    result = run_manage(
        "check", env={"OPENRATH_PROFILE": "staging", "OPENRATH_DATA_DIR": str(tmp_path)}
    )
    assert result.returncode != 0
    assert "OPENRATH_PROFILE must be one of embedded, production" in result.stderr
