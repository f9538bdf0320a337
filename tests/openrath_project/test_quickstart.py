"""The README's main command, without serving: idempotent set-up that prints a working token."""

from __future__ import annotations

from tests.support import run_manage


def test_quickstart_sets_up_and_prints_a_working_token(tmp_path):
    env = {"OPENRATH_DATA_DIR": str(tmp_path), "DATABASE_URL": ""}
    first = run_manage("quickstart", "--no-serve", env=env)
    assert first.returncode == 0, first.stderr
    token = next(
        line.split(":", 1)[1].strip()
        for line in first.stdout.splitlines()
        if line.strip().startswith("API token")
    )
    assert token.startswith("ort_")
    again = run_manage("quickstart", "--no-serve", env=env)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "db.sqlite3").exists()
    check = run_manage(
        "shell",
        "-c",
        "from django.test import Client; "
        f"r = Client().get('/api/v1/projects/', HTTP_AUTHORIZATION='Bearer {token}', "
        "HTTP_HOST='localhost'); print(r.status_code, [p['slug'] for p in r.json()['results']])",
        env=env,
    )
    assert check.stdout.strip().splitlines()[-1] == "200 ['demo']", check.stderr
