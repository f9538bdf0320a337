"""Issue 18 item 3: a non-editable install (``pip install .``) serves the console.

The top-level ``templates/`` (DESIGN.md's layout) goes into the wheel as data files and the
settings find it there when there is no checkout; static files the console serves are package
data. The npm graph libraries are not in the wheel: the lineage page says how to get them.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.error
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from benchmarks._common import free_ports
from tests.support import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
INSTALLED_TEMPLATES = "share/openrath-django/templates"
PACKAGES = ("openrath_project", "sessions_app", "runs_app", "effects_app", "memory_app")


def _data_file_destinations() -> dict[str, str]:
    """Each file the data-files table takes from the checkout -> where the wheel installs it."""
    destinations: dict[str, str] = {}
    for target, patterns in SETUPTOOLS["data-files"].items():
        for pattern in patterns:
            for path in REPO.glob(pattern):
                assert path.relative_to(REPO).as_posix() not in destinations, path
                destinations[path.relative_to(REPO).as_posix()] = f"{target}/{path.name}"
    return destinations


def test_every_template_is_a_data_file_in_the_same_place():
    templates = sorted(
        p.relative_to(REPO).as_posix() for p in (REPO / "templates").rglob("*") if p.is_file()
    )
    assert templates, "no templates found"
    destinations = _data_file_destinations()
    assert sorted(destinations) == templates
    for source, target in destinations.items():
        assert target == f"{INSTALLED_TEMPLATES}/{source.removeprefix('templates/')}"


def test_every_non_python_file_of_the_packages_is_package_data():
    patterns = SETUPTOOLS["package-data"]["*"]
    missing = [
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in (REPO / package).rglob("*")
        if path.is_file()
        and "node_modules" not in path.parts  # npm's, fetched by deploy/bin/console-assets
        and "__pycache__" not in path.parts
        and path.suffix not in (".py", ".pyc")
        and not any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)
    ]
    assert missing == []


def test_settings_find_the_installed_templates_without_a_checkout(tmp_path, monkeypatch):
    from openrath_project import settings as project_settings

    prefix = tmp_path / "prefix"
    installed = prefix / INSTALLED_TEMPLATES
    installed.mkdir(parents=True)
    real_get_path = sysconfig.get_path

    def get_path(name: str, scheme: str | None = None) -> str:
        # This interpreter's own data path is where pip would put the data files; here a
        # directory of the test's, so that the real prefix is not written to.
        if name == "data" and scheme is None:
            return str(prefix)
        return real_get_path(name) if scheme is None else real_get_path(name, scheme)

    assert project_settings._site_templates() == REPO / "templates"  # a checkout: its own
    monkeypatch.setattr(project_settings, "BASE_DIR", tmp_path / "site-packages")
    monkeypatch.setattr(sysconfig, "get_path", get_path)
    assert project_settings._site_templates() == installed


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_serves_the_console(tmp_path):
    """Build the wheel (pip, as `pip install .` does: an isolated build needs the index or a
    cache for setuptools), install it without dependencies into a fresh virtualenv that takes
    the dependencies from the project's, and serve from a directory that is no checkout."""
    source = tmp_path / "src"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        origin = REPO / os.fsdecode(name)
        if origin.is_file():
            target = source / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(origin.read_bytes())
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(dist)],
        cwd=source,
        check=True,
        timeout=600,
    )
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(f"/data/{INSTALLED_TEMPLATES}/console/login.html") for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The project's environment supplies the dependencies (a .pth path is appended after the
    # fresh site-packages, and its own .pth files, the editable install's, are not read).
    (site / "project-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", wheel],
        check=True,
        timeout=600,
    )
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")},
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_PROFILE": "embedded",
        "OPENRATH_DATA_DIR": str(tmp_path / "data"),
    }
    where = subprocess.run(
        [python, "-c", "import openrath_project; print(openrath_project.__file__)"],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(site)), where  # the installed copy, not the checkout
    subprocess.run([python, "-m", "django", "migrate", "-v0"], cwd=run_dir, env=env, check=True)
    (port,) = free_ports(1)
    log = tmp_path / "server.log"
    with log.open("wb") as handle:
        server = subprocess.Popen(
            [python, "-m", "uvicorn", "openrath_project.asgi:application", "--port", str(port)],
            cwd=run_dir,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        statuses: dict[str, int] = {}
        deadline = time.monotonic() + 120
        for path in ("/console/login/", "/static/console/favicon.svg", "/api/v1/docs/"):
            while True:
                try:
                    url = f"http://127.0.0.1:{port}{path}"
                    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310
                        statuses[path] = response.status
                    break
                except urllib.error.HTTPError as exc:  # an answer (say, the 500 it was)
                    statuses[path] = exc.code
                    break
                except OSError:  # not listening yet
                    assert server.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.3)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert statuses == {
        "/console/login/": 200,
        "/static/console/favicon.svg": 200,
        "/api/v1/docs/": 200,
    }, log.read_text()
    assert "TemplateDoesNotExist" not in log.read_text()
