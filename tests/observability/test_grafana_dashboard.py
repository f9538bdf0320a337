"""deploy/grafana-dashboard.json charts what /metrics exports: every metric it queries is one
the product serves, and every product metric is on it."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO

DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"
# prometheus_client writes a ``<name>_created`` sample beside a counter's or histogram's
# samples once it has some (the plain-text parser reads it as a family of its own).
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@pytest.mark.django_db
def test_the_dashboard_queries_exactly_the_exported_metrics(client):
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {_family(n) for e in expressions for n in re.findall(r"\bopenrath_[a-z_]+", e)}
    served = {
        _family(f.name)
        for f in text_string_to_metric_families(client.get("/metrics").content.decode())
        if f.name.startswith("openrath_")
    }
    assert queried == served
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
