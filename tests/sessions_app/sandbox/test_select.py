"""``OPENRATH_SANDBOX``: which backend confines a ``"local"`` placement's commands; saying so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sessions_app.sandbox import (
    BwrapSandbox,
    LocalSandbox,
    SandboxUnavailable,
    bwrap_probe,
    reset_sandbox_status,
    sandbox_for,
    sandbox_mode,
    sandbox_status,
)
from tests.support import service_missing


@pytest.fixture(autouse=True)
def fresh_status():
    reset_sandbox_status()
    yield
    reset_sandbox_status()


@pytest.fixture
def bwrap_works():
    if not bwrap_probe().ok:
        service_missing(f"needs bubblewrap: {bwrap_probe().detail}")


def _placement(tmp_path: Path, backend: str = "local") -> dict[str, str]:
    return {"backend": backend, "spec": str(tmp_path / "ws")}


def test_auto_uses_bwrap_where_it_works(tmp_path, monkeypatch, bwrap_works, caplog):
    monkeypatch.delenv("OPENRATH_SANDBOX", raising=False)
    with caplog.at_level(logging.INFO, logger="sessions_app.sandbox"):
        sandbox = sandbox_for(_placement(tmp_path))
        sandbox_for(_placement(tmp_path))
    assert type(sandbox) is BwrapSandbox
    status = sandbox_status()
    assert (status.mode, status.backend, status.ok) == ("auto", "bwrap", True)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"tool sandbox: {status.detail}")
    ]
    assert sandbox.run_shell("echo hi").stdout == "hi\n"


def test_auto_falls_back_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OPENRATH_SANDBOX", "auto")
    monkeypatch.setenv("OPENRATH_BWRAP", str(tmp_path / "no-bwrap"))
    with caplog.at_level(logging.INFO, logger="sessions_app.sandbox"):
        sandbox = sandbox_for(_placement(tmp_path))
    assert type(sandbox) is LocalSandbox
    assert sandbox_status().as_dict() == {
        "mode": "auto",
        "backend": "local",
        "os_sandbox": False,
        "ok": True,
        "detail": "falling back to the path-confined local backend: bwrap is not installed "
        "(Debian: apt-get install bubblewrap)",
    }
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "falling back to the path-confined local backend" in caplog.records[0].getMessage()
    assert sandbox.run_shell("echo hi").stdout == "hi\n"


def test_local_on_purpose(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRATH_SANDBOX", "local")
    assert type(sandbox_for(_placement(tmp_path))) is LocalSandbox
    assert sandbox_status().backend == "local"
    assert sandbox_status().ok is True


def test_required_bwrap_refuses_commands_when_missing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OPENRATH_SANDBOX", "bwrap")
    monkeypatch.setenv("OPENRATH_BWRAP", str(tmp_path / "no-bwrap"))
    with caplog.at_level(logging.INFO, logger="sessions_app.sandbox"):
        sandbox = sandbox_for(_placement(tmp_path))
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    # Files still work (they never left the server process); commands are refused unrun.
    assert sandbox.write_file("a.txt", "x") == 1
    with pytest.raises(SandboxUnavailable, match="OPENRATH_SANDBOX=bwrap but bwrap is not"):
        sandbox.run_shell("touch ran")
    with pytest.raises(SandboxUnavailable):
        sandbox.run_python("open('ran', 'w')")
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["a.txt"]
    assert sandbox_status().ok is False


def test_a_bwrap_placement_is_bwrap_or_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRATH_SANDBOX", "local")
    refused = sandbox_for(_placement(tmp_path, "bwrap"))
    with pytest.raises(SandboxUnavailable, match="the bwrap backend is not in force"):
        refused.run_shell("true")


def test_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("OPENRATH_SANDBOX", "docker")
    with pytest.raises(ValueError, match="OPENRATH_SANDBOX must be one of auto, bwrap, local"):
        sandbox_mode()
