"""Shared plumbing of the benchmark scripts: a throw-away PostgreSQL database, Django set-up,
timing statistics and the RESULTS.md writer. Benchmarks only ever target 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "RESULTS.md"
DEFAULT_SERVER = "postgres://root@127.0.0.1:5432"


def fresh_postgres(name: str, server: str = DEFAULT_SERVER) -> str:
    """Drop and create database ``name``; returns its URL."""
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def setup_django(database_url: str, data_dir: str | None = None) -> None:
    """Configure Django on ``database_url`` and migrate it."""
    sys.path.insert(0, str(REPO))
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault(
        "OPENRATH_DATA_DIR", data_dir or tempfile.mkdtemp(prefix="openrath-bench-")
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "openrath_project.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 <= q <= 1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def p99_ms(samples: list[float]) -> float:
    return percentile(samples, 0.99) * 1000


def machine_note() -> str:
    cpus = os.cpu_count()
    return (
        f"{platform.machine()}, {cpus} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; shared, noisy machine"
    )


def write_section(key: str, title: str, body: str, command: str) -> None:
    """Replace this benchmark's section of RESULTS.md (between its markers)."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"{start}\n## {title}\n\n"
        f"Command: `{command}`  \nDate: {stamp}  \nMachine: {machine_note()}\n\n"
        f"{body.strip()}\n{end}"
    )
    text = (
        RESULTS.read_text()
        if RESULTS.exists()
        else (
            "# Benchmark results\n\nEach section is rewritten by the script that measured it. "
            "Figures are medians (and p99 where stated) of repeated runs in one process; compare "
            "ratios measured in the same run, not absolute times across runs.\n"
        )
    )
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + section + after
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    RESULTS.write_text(text)


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py <args>`` in a fresh interpreter with ``env``; its last line of output.
    Raises with the command's stderr when it fails."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {result.stderr[-2000:]}")
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else ""


# --- Ports on 127.0.0.1 (benchmarks and the tests that start the production profile) ---------


def _service_port_range() -> range:
    """Ports for the servers tests and benchmarks start: below Linux's ephemeral range, so no
    outgoing connection can take one between the check and the server binding it, and a client
    retrying a stopped server (an outage drill) can never connect to itself (TCP self-connect),
    which holds the port and keeps the server from coming back."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(20000, max(low, 21000))


_HANDED_OUT: set[int] = set()


def _bindable(ports: range) -> bool:
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for sock in sockets:
            sock.close()


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 a moment ago (SeaweedFS's gRPC
    ports are BASE+0..3), from the service range above."""
    span = _service_port_range()
    for _ in range(500):
        base = span.start + secrets.randbelow(len(span) - count)
        ports = range(base, base + count)
        # Never the same port twice in one process: a port handed out a moment ago may not be
        # bound yet by the server it was meant for.
        if _HANDED_OUT.isdisjoint(ports) and _bindable(ports):
            _HANDED_OUT.update(ports)
            return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 a moment ago, from the service range above."""
    return [consecutive_free_ports(1) for _ in range(count)]


#: libpq requests, one round trip each outside pipeline mode (which nothing here uses).
ROUND_TRIP_METHODS = (
    "send_query",
    "send_query_params",
    "send_query_prepared",
    "send_prepare",
    "send_describe_prepared",
    "send_describe_portal",
    "send_close_prepared",
    "send_close_portal",
    "exec_",
    "exec_params",
    "exec_prepared",
    "prepare",
    "describe_prepared",
    "describe_portal",
    "close_prepared",
    "close_portal",
)
