"""Security headers: a Content-Security-Policy without inline script on console, admin and API
docs pages, Permissions-Policy, no-store on authenticated answers, the console login lifetime."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client, override_settings

from openrath_project.tenancy.services import user_join_tenant
from tests.support import REPO, run_manage

pytestmark = pytest.mark.django_db

POLICY = {
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
}
PASSWORD = "a-long-enough-password-1"


class Inline(HTMLParser):
    """Collects what a CSP without 'unsafe-inline' would block in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script = False
        self._script_attrs: dict[str, str | None] = {}
        self._script_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, _ in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
        if "style" in named:
            self.found.append(f"<{tag} style=...>")
        if tag == "style":
            self.found.append("<style>")
        if tag == "script":
            self._in_script, self._script_attrs, self._script_text = True, named, ""
        if tag in ("a", "form", "iframe") and str(
            named.get("href") or named.get("action") or named.get("src") or ""
        ).lower().startswith("javascript:"):
            self.found.append(f"<{tag} javascript: url>")

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self._script_text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script:
            self._in_script = False
            data_block = self._script_attrs.get("type") == "application/json"
            if "src" not in self._script_attrs and not data_block:
                self.found.append(f"inline <script>{self._script_text.strip()[:60]}")


def policy_of(response: Any) -> set[str]:
    return {part.strip() for part in response["Content-Security-Policy"].split(";")}


def inline_code(html: str) -> list[str]:
    parser = Inline()
    parser.feed(html)
    return parser.found


@pytest.fixture
def console_user(tenant: Any) -> Any:
    from django.contrib.auth import get_user_model

    user_join_tenant(tenant=tenant, username="ada", role="admin", password=PASSWORD)
    user = get_user_model().objects.get(username="ada")
    user.is_staff = user.is_superuser = True
    user.save()
    return user


@pytest.fixture
def browser(console_user: Any) -> Client:
    client = Client()
    client.force_login(console_user)
    return client


@pytest.mark.parametrize(
    "path",
    ["/console/", "/console/approvals/", "/console/runs/", "/console/sessions/", "/admin/"],
)
def test_logged_in_pages_carry_the_policy_and_no_inline_code(browser, path):
    response = browser.get(path)
    assert response.status_code == 200
    assert policy_of(response) == POLICY
    assert "unsafe" not in response["Content-Security-Policy"]
    assert inline_code(response.content.decode()) == []
    assert response["Permissions-Policy"].startswith("accelerometer=(), autoplay=(), camera=()")
    assert "microphone=()" in response["Permissions-Policy"]
    assert "no-store" in response["Cache-Control"]


def test_the_login_page_carries_the_policy_and_the_login_lasts_eight_hours(console_user):
    client = Client()
    page = client.get("/console/login/")
    assert policy_of(page) == POLICY
    assert inline_code(page.content.decode()) == []
    response = client.post("/console/login/", {"username": "ada", "password": PASSWORD})
    assert response.status_code == 302
    assert response.cookies["sessionid"]["max-age"] == 8 * 60 * 60


def test_the_console_login_lifetime_comes_from_the_environment():
    result = run_manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SESSION_COOKIE_AGE)",
        env={"OPENRATH_CONSOLE_SESSION_SECONDS": "900"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "900"


def test_the_api_docs_page_loads_its_script_from_a_file_not_inline(client):
    page = client.get("/api/v1/docs/")
    assert page.status_code == 200
    assert policy_of(page) == POLICY
    html = page.content.decode()
    assert inline_code(html) == []
    sources = re.findall(r'<script src="([^"]+)"', html)
    assert sources[-1] == "/api/v1/docs/?script="
    assert all(src.startswith(("/static/", "/api/v1/docs/")) for src in sources)
    assert "/static/console/swagger.css" in html
    script = client.get(sources[-1])
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()
    assert '"/api/v1/schema/"' in script.content.decode()


def test_authenticated_api_answers_are_not_stored(make_token, client_for):
    client = client_for(make_token(["projects:read"]))
    listed = client.get("/api/v1/projects/")
    assert listed.status_code == 200
    assert "no-store" in listed["Cache-Control"]
    assert listed["Permissions-Policy"].startswith("accelerometer=()")
    refused = client_for("ort_bad_token").get("/api/v1/projects/")
    assert refused.status_code == 401
    assert "no-store" in refused["Cache-Control"]


def test_an_operator_may_replace_the_permissions_policy(browser):
    with override_settings(OPENRATH_PERMISSIONS_POLICY="camera=(self)"):
        assert browser.get("/console/")["Permissions-Policy"] == "camera=(self)"


def test_no_template_of_the_project_holds_inline_script_or_style():
    templates = sorted((REPO / "templates").rglob("*.html"))
    assert templates
    found = {
        str(path.relative_to(REPO)): inline_code(path.read_text())
        for path in templates
        if inline_code(path.read_text())
    }
    assert found == {}
