"""Secrets from files (``*_FILE``), so a worker's environment need not hold them (issue 14,
item 7): the pure helper, and the settings of a real process start in both profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openrath_project.secretfiles import SecretFileError, secret_value, with_secret_files
from tests.support import run_manage


def test_file_values_replace_the_file_variables(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s3cr3t\n")
    environ = {"SECRET_KEY_FILE": str(key), "OTHER": "x"}

    assert with_secret_files(environ) == {**environ, "SECRET_KEY": "s3cr3t"}
    assert environ == {"SECRET_KEY_FILE": str(key), "OTHER": "x"}  # the input is not changed
    assert secret_value("SECRET_KEY", environ) == "s3cr3t"
    assert secret_value("MISSING", environ) == ""


def test_both_forms_or_an_unreadable_file_are_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s3cr3t")
    with pytest.raises(SecretFileError, match="set SECRET_KEY or SECRET_KEY_FILE, not both"):
        with_secret_files({"SECRET_KEY": "a", "SECRET_KEY_FILE": str(key)})
    with pytest.raises(SecretFileError) as caught:
        with_secret_files({"DATABASE_URL_FILE": str(tmp_path / "nope")})
    assert str(caught.value).startswith(f"DATABASE_URL_FILE={str(tmp_path / 'nope')!r} cannot be")


PRINT_SETTINGS = (
    "import json, os; from django.conf import settings; "
    "environ = open('/proc/self/environ').read(); "
    "print(json.dumps({'secret_key': settings.SECRET_KEY, "
    "'db_password': settings.DATABASES['default'].get('PASSWORD'), "
    "'redis': settings.REDIS_URL, "
    "'s3_secret': settings.STORAGES['default'].get('OPTIONS', {}).get('secret_key'), "
    "'in_environ': [s for s in ('K3y-', 'pw-db-', 's3-s3cret') if s in environ]}))"
)


def _files(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {}
    for name, value in values.items():
        path = tmp_path / name.lower()
        path.write_text(value + "\n")
        env[f"{name}_FILE"] = str(path)
    return env


def test_production_settings_read_secrets_from_files(tmp_path: Path) -> None:
    secret_key = "K3y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"
    env = {
        "OPENRATH_PROFILE": "production",
        "OPENRATH_DATA_DIR": str(tmp_path / "data"),
        "ALLOWED_HOSTS": "example.test",
        "S3_BUCKET": "bucket",
        "S3_ENDPOINT_URL": "http://127.0.0.1:1",
        "S3_ACCESS_KEY_ID": "access",
        "SECRET_KEY": "",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "S3_SECRET_ACCESS_KEY": "",
        **_files(
            tmp_path,
            SECRET_KEY=secret_key,
            DATABASE_URL="postgres://runtime:pw-db-1@127.0.0.1:5432/prod",
            REDIS_URL="redis://127.0.0.1:6379/3",
            S3_SECRET_ACCESS_KEY="s3-s3cret-2",
        ),
    }

    result = run_manage("shell", "-c", PRINT_SETTINGS, env=env)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "secret_key": secret_key,
        "db_password": "pw-db-1",
        "redis": "redis://127.0.0.1:6379/3",
        "s3_secret": "s3-s3cret-2",
        "in_environ": [],
    }


def test_an_unreadable_secret_file_refuses_to_start(tmp_path: Path) -> None:
    result = run_manage(
        "check",
        env={"SECRET_KEY": "", "SECRET_KEY_FILE": str(tmp_path / "missing")},
    )
    assert result.returncode != 0
    assert f"SECRET_KEY_FILE={str(tmp_path / 'missing')!r} cannot be read" in result.stderr
