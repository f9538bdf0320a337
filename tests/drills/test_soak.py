"""The soak test (``benchmarks/soak.py``), bounded: under a minute of the mixed workload on the
production profile, with no error. The 10-minute soak and its leak check: docs/drills.md."""

from __future__ import annotations

import shutil

import pytest

from tests.s3 import require_weed
from tests.support import service_missing

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_a_short_soak_completes_without_errors():
    import psycopg

    from benchmarks import soak
    from tests.drills.test_outage_drills import _shared_admin_url

    require_weed()
    if shutil.which("redis-server") is None:
        service_missing("needs redis-server (production-local starts one for the soak)")
    admin_url = _shared_admin_url()
    try:
        psycopg.connect(admin_url, connect_timeout=3).close()
    except Exception as exc:
        service_missing(f"needs PostgreSQL with a superuser at {admin_url}: {exc}")

    result, _ = soak.run_soak(minutes=0.75, sample_seconds=3, admin_url=admin_url)

    assert result["errors"] == 0, result["error_examples"]
    assert result["runs_succeeded"] >= 5
    assert result["interrupts_resolved"] >= result["runs_succeeded"]
    assert result["sessions"] >= 5
    assert result["ws_run_streams"] >= 1
    assert result["ws_session_streams"] >= 1
    assert result["samples"] >= 5
    assert {"session.create", "chunks.append", "session.fork", "run.create"} <= set(
        result["operations"]
    )
