"""deploy/bin/console-assets: the console's npm libraries, installed or one fast, readable failure.

``install-dev`` (and so the test command) and ``quickstart`` run it. Each test works on a copy of
the console's package.json and package-lock.json in a temporary directory, never on the checkout's
``node_modules``, and points npm at a registry that cannot answer.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, service_missing

SCRIPT = REPO / "deploy" / "bin" / "console-assets"
ASSETS = REPO / "openrath_project" / "console" / "assets"
#: Far above the script's worst case (two 15 s fetch attempts); npm's defaults take minutes.
DEADLINE = 150


def locked_versions() -> dict[str, str]:
    lock = json.loads((ASSETS / "package-lock.json").read_text())
    return {where: pkg["version"] for where, pkg in lock["packages"].items() if where}


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    target = tmp_path / "assets"
    target.mkdir()
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ASSETS / name, target / name)
    return target


def fake_install(assets: Path, versions: dict[str, str]) -> None:
    for where, version in versions.items():
        (assets / where).mkdir(parents=True)
        (assets / where / "package.json").write_text(json.dumps({"version": version}))


def run(assets: Path, registry: str, *args: str, path: str | None = None) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "OPENRATH_CONSOLE_ASSETS_DIR": str(assets),
        "npm_config_registry": registry,
        "npm_config_cache": str(assets.parent / "npm-cache"),
        "TMPDIR": str(assets.parent),
    }
    if path is not None:
        env["PATH"] = path
    result = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def require_npm() -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        service_missing("needs Node.js and npm (apt-get install -y nodejs npm)")


def refused_registry() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"  # nothing listens there: connection refused


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """A registry that accepts connections and never answers (a black-holed network)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}/"


def test_installed_at_the_locked_versions_needs_no_network(assets):
    require_npm()
    fake_install(assets, locked_versions())
    before = sorted(p.relative_to(assets) for p in assets.rglob("*"))
    assert run(assets, refused_registry()) == (0, "", "")
    assert sorted(p.relative_to(assets) for p in assets.rglob("*")) == before


def test_unreachable_registry_is_one_line_naming_the_cause(assets):
    require_npm()
    registry = refused_registry()
    code, out, err = run(assets, registry, "continuing without them")
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("console assets not installed: npm ci failed: ")
    assert "ECONNREFUSED" in lines[0]
    assert f"is {registry} reachable?" in lines[0]
    assert f"(retry: npm ci --prefix {assets}); continuing without them" in lines[0]
    log = Path(lines[0].split("(npm's output: ")[1].split(")")[0])
    assert "ECONNREFUSED" in log.read_text()
    assert not (assets / "node_modules").exists()


def test_an_outdated_install_is_reinstalled(assets):
    require_npm()
    fake_install(assets, dict.fromkeys(locked_versions(), "0.0.1"))
    code, _, err = run(assets, refused_registry())
    assert code == 1  # it tried npm ci (and the registry refused) instead of keeping 0.0.1
    assert "ECONNREFUSED" in err


@pytest.mark.slow
def test_a_silent_registry_fails_fast(assets, silent_registry):
    require_npm()
    started = time.monotonic()
    code, _, err = run(assets, silent_registry)
    elapsed = time.monotonic() - started
    assert code == 1
    assert "network timeout" in err, err
    assert len(err.splitlines()) == 1, err
    # npm's defaults (2 retries, 5 min fetch timeout) would be killed by run()'s DEADLINE.
    assert elapsed < DEADLINE


def test_without_npm_one_line_says_so(assets, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    code, out, err = run(assets, refused_registry(), path=str(bin_dir))
    assert (code, out) == (1, "")
    assert err == (
        "console assets not installed: npm not found (install Node.js and npm); the lineage graph "
        f"and its tests need them (retry: npm ci --prefix {assets})\n"
    )
