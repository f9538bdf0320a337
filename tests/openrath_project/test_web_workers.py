"""The web tier's process count: one per usable CPU in production, one embedded, env override."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project.server import cli
from openrath_project.server.web_workers import default_web_workers, usable_cpus


def test_production_runs_one_process_per_usable_cpu() -> None:
    assert default_web_workers(production=True, environ={}) == usable_cpus()
    assert usable_cpus() >= 1


def test_the_embedded_profile_runs_one_process() -> None:
    assert default_web_workers(production=False, environ={}) == 1


def test_the_environment_overrides_the_default() -> None:
    assert default_web_workers(production=True, environ={"OPENRATH_WEB_WORKERS": "3"}) == 3
    assert default_web_workers(production=False, environ={"OPENRATH_WEB_WORKERS": "2"}) == 2


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_a_count_below_one_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="OPENRATH_WEB_WORKERS must be at least 1"):
        default_web_workers(production=True, environ={"OPENRATH_WEB_WORKERS": bad})


def test_openrath_server_leaves_the_count_to_the_profile_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    def record(prog: str, command: str, arguments: Any) -> None:
        calls.append([command, *arguments])

    monkeypatch.setattr(cli, "_run", record)
    for name in ("OPENRATH_WEB_WORKERS", "OPENRATH_HOST", "OPENRATH_PORT", "OPENRATH_APP"):
        monkeypatch.delenv(name, raising=False)
    cli.server_main(["--port", "8123"])
    monkeypatch.setenv("OPENRATH_WEB_WORKERS", "4")
    cli.server_main(["--port", "8123"])
    cli.server_main(["--port", "8123", "--workers", "2"])
    assert calls == [
        ["serve", "--host", "0.0.0.0", "--port", "8123"],  # noqa: S104 - the default address
        ["serve", "--host", "0.0.0.0", "--port", "8123", "--workers", "4"],  # noqa: S104
        ["serve", "--host", "0.0.0.0", "--port", "8123", "--workers", "2"],  # noqa: S104
    ]
