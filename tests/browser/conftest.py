"""Browser tests: Debian's Chromium driven by Playwright against a real server process.

The server is ``manage.py serve`` (ASGI: HTTP and WebSocket, with the embedded profile's worker
threads) on a free port of 127.0.0.1, pointed at the pytest PostgreSQL test database; it is
killed at teardown. Playwright never downloads a browser here: it drives ``/usr/bin/chromium``
(``apt-get install chromium``; ``.ci/run`` and ``deploy/bin/test`` install it). Without
Chromium, Playwright or the console's npm assets the tests skip with the reason, and fail
under ``CI=true``. A failing test leaves a screenshot and the HTML of each open page in
``test-artifacts/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from runs_app.registry import WorkflowRegistry
from tests.support import REPO, require_postgres, service_missing

CHROMIUM = Path(os.environ.get("OPENRATH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts"
VENDOR = REPO / "openrath_project" / "console" / "assets" / "node_modules"
#: Playwright's wait for anything on a page: generous, so a loaded machine does not fail a test
#: that would pass (a wait ends as soon as the page shows what it waits for).
TIMEOUT_MS = 30_000


def require_browser() -> Any:
    """The Playwright module, or skip (locally) / fail (CI) saying what is missing."""
    if not CHROMIUM.exists():
        service_missing(f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright import sync_api
    except ImportError as exc:
        service_missing(f"needs Playwright for Python (pip install -e '.[dev]'): {exc}")
    return sync_api


def require_console_assets() -> None:
    for name in ("cytoscape/dist/cytoscape.min.js", "cytoscape-dagre/dist/cytoscape-dagre.js"):
        if not (VENDOR / name).exists():
            service_missing(
                f"needs the console's npm assets ({VENDOR / name} is missing): run "
                "./deploy/bin/install-dev or npm ci --prefix openrath_project/console/assets"
            )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``manage.py serve`` on the test database, on a free port."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        db = connection.settings_dict
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = (
            f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENRATH_", "DATABASE_", "REDIS_", "S3_"))
            # Lifted in this process for Playwright's loop only; the server keeps Django's check.
            and k != "DJANGO_ALLOW_ASYNC_UNSAFE"
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
                "PYTHONPATH": str(REPO),
                "DATABASE_URL": url,
                "OPENRATH_PROFILE": "embedded",
                "OPENRATH_DATA_DIR": str(self.tmp / "data"),
                "OPENRATH_WORKFLOW_MODULES": "tests.browser.workflows",
                "OPENRATH_DISPATCH": "local",
                "OPENRATH_EMBEDDED_WORKERS": "2",
                "OPENRATH_LEASE_SECONDS": "10",
                "SECRET_KEY": "browser-tests-only-" + "x" * 40,
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "LOG_LEVEL": "INFO",
            }
        )
        return env

    def start(self) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited early:\n{self.log()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response,  # noqa: S310
            ):
                if response.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"the server did not answer /healthz in 30 s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""


@pytest.fixture(scope="module")
def playwright_browser() -> Iterator[Any]:
    """One Chromium per module. Playwright's sync API keeps an event loop on this thread, which
    Django's async-safety check would take for async code calling the ORM; the ORM calls of these
    tests are synchronous, so the check is lifted while the browser runs (and only then)."""
    sync_api = require_browser()
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def server(transactional_db: Any, tmp_path: Path, playwright_browser: Any) -> Iterator[Server]:
    require_postgres()
    running = Server(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.stop()
        log = running.log()
        if log:
            print(f"--- server log ---\n{log}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


#: Records every Content-Security-Policy violation of a page (Playwright injects it without the
#: page's CSP applying to it) in ``window.__cspViolations``.
CSP_LISTENER = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(
    event.violatedDirective + " blocked " + (event.blockedURI || "inline") +
    " at " + event.documentURI + (event.sample ? " (" + event.sample + ")" : ""));
});
"""


def csp_violations(page: Any) -> list[str]:
    """The CSP violations the page (its current document) has seen so far."""
    return list(page.evaluate("() => window.__cspViolations || []"))


@pytest.fixture
def browser_context(
    request: pytest.FixtureRequest, server: Server, playwright_browser: Any
) -> Iterator[Any]:
    """A fresh browser profile on the server; pages of a failed test are saved as artifacts.

    The server's Content-Security-Policy is enforced (never bypassed): every console message
    about a violation, on any page of the test, fails the test at teardown. (Playwright's
    ``wait_for_function`` must be given a function, ``"() => ..."``: a bare expression is
    evaluated with ``eval``, which the policy forbids.)"""
    context = playwright_browser.new_context(base_url=server.url)
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(CSP_LISTENER)
    refused: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            refused.append(f"{message.type}: {message.text}")

    context.on("console", on_console)
    try:
        yield context
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            save_artifacts(request.node.name, context)
        context.close()
    assert refused == [], "the Content-Security-Policy blocked something:\n" + "\n".join(refused)


def save_artifacts(test_name: str, context: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
    for index, page in enumerate(context.pages):
        with contextlib.suppress(Exception):
            page.screenshot(path=str(ARTIFACTS / f"{stem}-{index}.png"), full_page=True)
        with contextlib.suppress(Exception):
            (ARTIFACTS / f"{stem}-{index}.html").write_text(page.content())


@pytest.fixture
def page(browser_context: Any) -> Any:
    return browser_context.new_page()


@pytest.fixture
def browser_registry() -> WorkflowRegistry:
    """The test process's registry of the workflows the server runs (same code, same plans)."""
    from tests.browser import workflows

    registry = WorkflowRegistry()
    registry.discover([workflows.__name__])
    return registry


def log_in(page: Any, username: str, password: str) -> None:
    """Log in through the real login form."""
    page.goto("/console/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/")


def wait_until(predicate: Any, *, timeout: float, what: str, every: float = 0.1) -> Any:
    """``predicate()``'s first true value, polled until ``timeout`` seconds have passed (then
    an ``AssertionError`` naming ``what``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def acme(transactional_db: Any) -> tuple[Any, Any]:
    """Tenant ``acme`` and its project ``web`` (committed: the server process reads them)."""
    from openrath_project.tenancy.services import project_create, tenant_create

    tenant = tenant_create(slug="acme")
    return tenant, project_create(tenant=tenant, slug="web")
