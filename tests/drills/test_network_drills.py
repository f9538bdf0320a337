"""The short network fault drill (``deploy/bin/drill-net --short``): three worker hosts in
network namespaces, PostgreSQL partitioned from one, black-holed for another, slowed by
200-2,000 ms of jittered latency for the third, then one partitioned from PostgreSQL while the
drill's operator resolves its runs' interrupts over the API, and one partitioned from S3 while
its runs store large state values there, each healed after a bounded time; the history checker
(``tests/drills/history.py``) must find nothing. The full set of faults is the command
itself (docs/drills.md, "Network faults").

Needs root, iproute2 and nftables (skipped with the reason otherwise; a failure under CI=true),
plus what the outage drills need: the PostgreSQL server binaries, redis-server, SeaweedFS. The
last test (the settings the drills' tuning chose) runs anywhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.drills import netbed
from tests.drills.test_outage_drills import _postgres_bindir
from tests.s3 import require_weed
from tests.support import REPO, service_missing

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

SCRIPT = REPO / "deploy" / "bin" / "drill-net"


@pytest.fixture
def bed_ready() -> None:
    reason = netbed.missing_tools()
    if reason:
        service_missing(f"the network drills: {reason}")
    if _postgres_bindir() is None:
        service_missing("needs the PostgreSQL server binaries (initdb, pg_ctl)")
    if shutil.which("redis-server") is None:
        service_missing("needs redis-server (apt-get install redis-server)")
    require_weed()


def test_the_bed_carries_traffic_and_its_faults_cut_it(bed_ready) -> None:
    """The bed itself: a host reaches its gateway's relay; an nft partition stops that; a
    healed link carries traffic again; everything is removed afterwards."""
    import socket
    import threading

    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen()
    port = echo.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = echo.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    proxy = netbed.FaultProxy()
    bed = netbed.Netbed(["w1"])
    try:
        bed.up()
        host = bed.hosts["w1"]
        proxy.add("w1/echo", (host.gateway, port), ("127.0.0.1", port))
        client = (
            "import socket,sys;"
            "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=3);"
            "s.sendall(b'ping');print(s.recv(100).decode())"
        )

        def call() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["ip", "netns", "exec", host.namespace, "python3", "-c", client,
                 host.gateway, str(port)],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip

        first = call()
        assert first.stdout.strip() == "ping", first.stderr
        bed.drop("w1", port)
        cut = call()
        assert cut.returncode != 0
        assert "timed out" in cut.stderr
        bed.heal("w1")
        assert call().stdout.strip() == "ping"
        proxy.set("w1/echo", mode="blackhole")
        held = call()  # connected, then silence
        assert held.returncode != 0
        assert "timed out" in held.stderr
        proxy.set("w1/echo")
        assert call().stdout.strip() == "ping"
    finally:
        proxy.close()
        bed.down()
        echo.close()
    assert netbed.sweep(bed.tag) == []


def test_the_short_network_drill_finds_no_violation(bed_ready, tmp_path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [str(SCRIPT), "--short", "--batch", "6", "--fault-seconds", "6", "--out", str(out),
         "--keep", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.exists(), result.stderr[-5000:]
    results = json.loads(out.read_text())
    assert results["violations"] == [], json.dumps(results, indent=2)[-8000:]
    assert results["leftovers"] == []
    assert result.returncode == 0, result.stderr[-3000:]
    counts = results["counts"]
    assert counts["runs"] >= 30  # 6 per fault, and probes until the faulted host is back
    assert counts["succeeded"] + counts["needs_review"] == counts["runs"]
    assert counts["commits"] == counts["chunks"]
    assert counts["faults"] == 5
    assert [f["name"] for f in results["faults"]] == [
        "pg-partition",
        "pg-blackhole",
        "pg-latency-200-2000ms",
        "approval-pg-partition",
        "s3-partition",
    ]
    # every approval run's interrupt resolved once over the API, the second resolve a 409
    assert counts["interrupts"] == 6
    assert results["resolutions"] == {"200": 6, "409": 6}
    assert results["resolution_to_resume"]["max"] <= 120
    assert counts["artifacts_read"] >= 6  # each net_artifacts run's document, read from S3
    assert all(results["workers_alive"].values()), results["worker_logs"]
    assert set(results["claims_by_host"]) == {"w1", "w2", "w3"}, results["claims_by_host"]
    assert sum(f["runs_caught"] for f in results["faults"]) > 0  # faults hit runs in flight
    assert results["recovery"]["max"] <= 120
    assert results["host_back"]["max"] <= 120


def test_the_production_profile_keeps_the_tuning_the_drills_measured() -> None:
    """docs/operations.md "Network faults": a TCP user timeout and keepalives on PostgreSQL
    connections, and the runtime role's idle-in-transaction limit (production only)."""
    import os
    import secrets
    import sys

    probe = (
        "from django.conf import settings; import json; "
        "print(json.dumps(settings.DATABASES['default']['OPTIONS']))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DATABASE_"))}
    production = {
        **base,
        "OPENRATH_PROFILE": "production",
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "drill.invalid",
        "DATABASE_URL": "postgres://app@127.0.0.1:5432/openrath",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "S3_BUCKET": "openrath",
        "S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "S3_ACCESS_KEY_ID": "drill",
        "S3_SECRET_ACCESS_KEY": "drill",
    }

    def options(**env: str) -> dict[str, object]:
        result = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {probe}"],
            cwd=REPO, env={**production, **env}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))

    tuned = options()
    assert tuned["tcp_user_timeout"] == 10000
    assert (tuned["keepalives"], tuned["keepalives_idle"]) == (1, 10)
    assert (tuned["keepalives_interval"], tuned["keepalives_count"]) == (5, 3)
    assert tuned["options"] == "-c idle_in_transaction_session_timeout=60000"
    off = options(
        DATABASE_TCP_USER_TIMEOUT_MS="0",
        DATABASE_KEEPALIVES_IDLE="0",
        DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS="0",
    )
    assert not {"tcp_user_timeout", "keepalives", "options"} & set(off)
    embedded = options(OPENRATH_PROFILE="embedded")
    assert "options" not in embedded
    assert embedded["tcp_user_timeout"] == 10000


def test_the_production_s3_client_gives_up_on_a_hung_connection_within_a_lease() -> None:
    """docs/operations.md "Network faults": the S3 client's defaults (a 10 s read timeout, 2
    attempts in all) bound a storage call on a connection that hangs to about 26 s, under the
    production lease (30 s), so the step fails, is retried and another host can take it."""
    import os
    import secrets
    import sys

    probe = (
        "from django.conf import settings; import json; "
        "c = settings.STORAGES['default']['OPTIONS']['client_config']; "
        "print(json.dumps([c.connect_timeout, c.read_timeout, c.retries, "
        "settings.OPENRATH_LEASE_SECONDS]))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "S3_"))}
    production = {
        **base,
        "OPENRATH_PROFILE": "production",
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "drill.invalid",
        "DATABASE_URL": "postgres://app@127.0.0.1:5432/openrath",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "S3_BUCKET": "openrath",
        "S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "S3_ACCESS_KEY_ID": "drill",
        "S3_SECRET_ACCESS_KEY": "drill",
    }
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {probe}"],
        cwd=REPO, env=production, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    connect, read, retries, lease = json.loads(result.stdout.strip().splitlines()[-1])
    assert (connect, read) == (3.0, 10.0)
    assert retries == {"total_max_attempts": 2, "mode": "standard"}
    assert retries["total_max_attempts"] * (connect + read) < lease
