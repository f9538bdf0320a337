"""The OpenAPI document: committed and current, every operation states its grant, docs offline."""

from __future__ import annotations

import re

import pytest

from openrath_project.server.management.commands.openapi import DEFAULT_PATH, render_schema

pytestmark = pytest.mark.django_db


def test_committed_document_is_current():
    assert DEFAULT_PATH.read_text() == render_schema(), (
        "deploy/openapi-v1.json is stale: run `python manage.py openapi`"
    )


def test_every_operation_declares_grant_and_error_body(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    operations = [
        (path, method, op) for path, ops in schema["paths"].items() for method, op in ops.items()
    ]
    assert operations
    for path, method, op in operations:
        assert op.get("x-required-grant"), f"{method.upper()} {path} declares no grant"
        for status in ("400", "401", "403", "404"):
            ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/Error", (path, method, status)


def test_docs_ui_uses_only_local_assets(client):
    page = client.get("/api/v1/docs/").content.decode()
    urls = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert urls
    # Static files, and the start-up script the page's own view serves (no inline script: CSP).
    assert all(u.startswith("/static/") or u == "/api/v1/docs/?script=" for u in urls), urls
    assert "cdn" not in page.lower()
    for url in urls:
        assert client.get(url).status_code == 200, url
