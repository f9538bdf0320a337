"""Soak test: a bounded mixed workload on the production profile, watching for leaks (issue 10).

    python benchmarks/soak.py                  # 10 minutes, writes the "soak" section of RESULTS.md
    python benchmarks/soak.py --minutes 1 --quick

Starts the whole production profile with ``deploy/bin/production-local`` (on a database, roles
and a Redis of its own; stopped and dropped at the end, also on failure) and runs, for
``--minutes``, on 127.0.0.1:

* session clients: create a session, append chunks, fork it, append to the fork, read it back;
* run clients: start a ``soak_review`` run (a draft, an approval interrupt, an idempotent
  effect) and wait for it to succeed;
* a scripted operator that lists pending interrupts and approves them over the HTTP API;
* WebSocket subscribers that follow run streams to their end and session streams for a while,
  checking that every item arrives once and in order.

Every failed request, unexpected status, run that does not succeed and stream gap or duplicate
is an error (there must be none). Every ``--sample-seconds`` it samples each process of the
profile (web, Celery worker with its pool, beat): RSS and open file descriptors from
``/proc/<pid>``, its PostgreSQL connections (its sockets to the server, from ``/proc``), and the
database's connections from ``pg_stat_activity``. Plateau check: the median of the last third
of the samples against the median of the middle third; growth beyond ``--growth-limit`` (and
beyond a small absolute floor) fails the soak. Reports runs completed, errors, p50/p99 per
operation and the samples.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    consecutive_free_ports,
    free_ports,
    percentile,
    write_section,
)

SCRIPT = REPO / "deploy" / "bin" / "production-local"
DEFAULT_ADMIN_URL = "postgres://root@127.0.0.1:5432/postgres"
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "needs_review"}
#: Processes sampled, by their production-local pid file.
PROCESSES = ("web", "worker", "beat")
#: Absolute growth that is never a leak, whatever the ratio (allocator and page-cache noise).
FLOORS = {"rss_mib": 8.0, "fds": 8.0, "pg_connections": 4.0}


# --- The production profile ------------------------------------------------------------------


class Profile:
    """A production-local instance on names of its own (database, roles, Redis port)."""

    def __init__(self, run_dir: Path, admin_url: str) -> None:
        suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
        web, s3, master, volume, filer, metrics, redis_port = free_ports(7)
        self.run_dir = run_dir
        self.admin_url = admin_url
        self.base = f"http://127.0.0.1:{web}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DJANGO_"))},
            "OPENRATH_LOCAL_DIR": str(run_dir),
            "OPENRATH_LOCAL_WEB_PORT": str(web),
            "OPENRATH_LOCAL_PG_ADMIN_URL": admin_url,
            "OPENRATH_LOCAL_DB": f"openrath_soak_{suffix}",
            "OPENRATH_LOCAL_OWNER_ROLE": f"openrath_soak_owner_{suffix}",
            "OPENRATH_LOCAL_RUNTIME_ROLE": f"openrath_soak_app_{suffix}",
            # A port nothing answers on: production-local starts (and stops) a Redis of its own.
            "OPENRATH_LOCAL_REDIS_PORT": str(redis_port),
            "OPENRATH_LOCAL_REDIS_DB": "0",
            "OPENRATH_LOCAL_S3_PORT": str(s3),
            "OPENRATH_LOCAL_WEED_MASTER_PORT": str(master),
            "OPENRATH_LOCAL_WEED_VOLUME_PORT": str(volume),
            "OPENRATH_LOCAL_WEED_FILER_PORT": str(filer),
            "OPENRATH_LOCAL_WEED_GRPC_BASE": str(consecutive_free_ports(4)),
            "OPENRATH_LOCAL_WORKER_METRICS_PORT": str(metrics),
            "OPENRATH_WORKFLOW_MODULES": "benchmarks.soak_workflows",
            # The soak measures leaks, not the write rate limit.
            "OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE": "1000000",
            "OPENRATH_RATE_LIMIT_BURST": "100000",
            "LOG_LEVEL": "WARNING",
        }
        for key in ("DATABASE_URL", "MIGRATION_DATABASE_URL", "REDIS_URL", "S3_BUCKET"):
            self.env.pop(key, None)
        self.database = self.env["OPENRATH_LOCAL_DB"]
        self.pg_port = urlsplit(admin_url).port or 5432

    def start(self) -> None:
        result = subprocess.run(
            [str(SCRIPT), "start"],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"production-local start failed:\n{result.stderr[-4000:]}")

    def stop(self) -> None:
        subprocess.run(
            [str(SCRIPT), "stop"], cwd=REPO, env=self.env, capture_output=True, timeout=180
        )

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            for role in ("OPENRATH_LOCAL_RUNTIME_ROLE", "OPENRATH_LOCAL_OWNER_ROLE"):
                admin.execute(f'DROP ROLE IF EXISTS "{self.env[role]}"')

    def manage(self, *args: str) -> str:
        env = dict(self.env)
        for line in (self.run_dir / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export ") :].partition("=")
                env[key] = value.strip("'")
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed: {result.stderr[-2000:]}")
        return result.stdout.strip().splitlines()[-1]

    def pid(self, name: str) -> int:
        return int((self.run_dir / "pids" / f"{name}.pid").read_text())


# --- Measuring ---------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Latencies per operation and every error, from all client threads."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    errors: list[str] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, op: str, seconds: float) -> None:
        with self.lock:
            self.latencies[op].append(seconds)

    def error(self, op: str, message: str) -> None:
        with self.lock:
            self.errors.append(f"{op}: {message}"[:500])

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n


def call(
    recorder: Recorder,
    op: str,
    method: str,
    url: str,
    token: str,
    body: Any = None,
    expect: int = 200,
) -> Any:
    """One timed request; anything but ``expect`` is an error (and ``None`` is returned)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        url,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - localhost
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    except OSError as exc:
        recorder.error(op, f"{type(exc).__name__}: {exc}")
        return None
    elapsed = time.perf_counter() - started
    if status != expect:
        recorder.error(op, f"{status}: {raw[:300]!r}")
        return None
    recorder.ok(op, elapsed)
    return json.loads(raw or b"null")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found.append(int(entry))
    return found


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _postgres_socket_inodes(pg_port: int) -> set[str]:
    """Inodes of established TCP connections to the PostgreSQL port (this network namespace)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                remote_port = int(parts[2].rsplit(":", 1)[1], 16)
                if remote_port == pg_port and parts[3] == "01":
                    inodes.add(parts[9])
    return inodes


def sample_processes(profile: Profile) -> dict[str, dict[str, float]]:
    """RSS (MiB), open fds and PostgreSQL connections of each process, its children included
    (the Celery worker's pool)."""
    pg_sockets = _postgres_socket_inodes(profile.pg_port)
    out: dict[str, dict[str, float]] = {}
    for name in PROCESSES:
        pid = profile.pid(name)
        pids = [pid, *_children(pid)]
        rss = fds = pg = 0
        for member in pids:
            with contextlib.suppress(OSError):
                rss += _rss_kib(member)
                fds += len(os.listdir(f"/proc/{member}/fd"))
                pg += len(_socket_inodes(member) & pg_sockets)
        out[name] = {
            "rss_mib": rss / 1024,
            "fds": float(fds),
            "pg_connections": float(pg),
            "processes": float(len(pids)),
        }
    return out


def sample_database(profile: Profile) -> dict[str, float]:
    import psycopg

    with psycopg.connect(profile.admin_url, autocommit=True, connect_timeout=5) as admin:
        rows = admin.execute(
            "SELECT coalesce(state, ''), count(*) FROM pg_stat_activity "
            "WHERE datname = %s AND usename = %s GROUP BY 1",
            (profile.database, profile.env["OPENRATH_LOCAL_RUNTIME_ROLE"]),
        ).fetchall()
    by_state = {state: float(count) for state, count in rows}
    return {"pg_connections": sum(by_state.values()), "pg_active": by_state.get("active", 0.0)}


def plateau(series: list[float], limit: float, floor: float) -> tuple[float, float, bool]:
    """(median of the middle third, median of the last third, whether it grew too much)."""
    third = max(1, len(series) // 3)
    middle = statistics.median(series[third : 2 * third] or series)
    last = statistics.median(series[2 * third :] or series)
    grew = last - middle > floor and (middle <= 0 or (last - middle) / middle > limit)
    return middle, last, grew


# --- The workload ------------------------------------------------------------------------------


class Soak:
    def __init__(
        self,
        profile: Profile,
        *,
        seconds: float,
        session_clients: int,
        run_clients: int,
        subscribers: int,
        sample_seconds: float,
        think: float,
    ) -> None:
        self.profile = profile
        self.api = profile.base + "/api/v1"
        self.seconds = seconds
        self.session_clients = session_clients
        self.run_clients = run_clients
        self.subscribers = subscribers
        self.sample_seconds = sample_seconds
        self.think = think
        self.recorder = Recorder()
        self.stop = threading.Event()
        self.clients_done = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self.recent_runs: collections.deque[str] = collections.deque(maxlen=20)
        self.recent_sessions: collections.deque[str] = collections.deque(maxlen=20)
        self.tokens: dict[str, str] = {}

    def mint_tokens(self) -> None:
        profile = self.profile
        profile.manage("create_tenant", "soak")
        profile.manage("create_project", "soak", "soak")
        grants = {
            "client": "sessions:read,sessions:write,runs:read,runs:write",
            "operator": "interrupts:read,interrupts:resolve",
            "reader": "sessions:read,runs:read",
        }
        for name, granted in grants.items():
            self.tokens[name] = profile.manage(
                "create_token", "soak", "--grants", granted, "--name", f"soak-{name}"
            )

    # clients

    def session_client(self, index: int) -> None:
        token, rec, n = self.tokens["client"], self.recorder, 0
        while not self.stop.is_set():
            n += 1
            session = call(
                rec,
                "session.create",
                "POST",
                f"{self.api}/sessions/",
                token,
                {"project": "soak", "user_message": f"client {index} question {n}"},
                expect=201,
            )
            if session is None:
                time.sleep(0.5)
                continue
            sid = session["id"]
            self.recent_sessions.append(sid)
            for k in range(3):
                chunks = [
                    {"role": "assistant", "content": {"text": f"answer {n}.{k}.{j}"}}
                    for j in range(2)
                ]
                call(
                    rec,
                    "chunks.append",
                    "POST",
                    f"{self.api}/sessions/{sid}/chunks/",
                    token,
                    {"chunks": chunks},
                    expect=201,
                )
                time.sleep(self.think)
            fork = call(
                rec,
                "session.fork",
                "POST",
                f"{self.api}/sessions/{sid}/fork/",
                token,
                {"title": f"fork {n}", "at": 3},
                expect=201,
            )
            if fork is not None:
                call(
                    rec,
                    "chunks.append",
                    "POST",
                    f"{self.api}/sessions/{fork['id']}/chunks/",
                    token,
                    {"chunks": [{"role": "user", "content": {"text": f"follow-up {n}"}}]},
                    expect=201,
                )
                page = call(
                    rec,
                    "chunks.read",
                    "GET",
                    f"{self.api}/sessions/{fork['id']}/chunks/?after=-1&limit=50",
                    token,
                )
                if page is not None and len(page["results"]) != 4:
                    rec.error("chunks.read", f"fork has {len(page['results'])} chunks, not 4")
            rec.count("sessions")
            time.sleep(self.think)

    def run_client(self, index: int) -> None:
        token, rec, n = self.tokens["client"], self.recorder, 0
        while not self.stop.is_set():
            n += 1
            began = time.perf_counter()
            run = call(
                rec,
                "run.create",
                "POST",
                f"{self.api}/runs/",
                token,
                {
                    "workflow": "soak_review",
                    "project": "soak",
                    "user_message": f"client {index} topic {n}",
                    "state": {"n": n},
                },
                expect=201,
            )
            if run is None:
                time.sleep(0.5)
                continue
            self.recent_runs.append(run["id"])
            deadline = time.monotonic() + 120
            status = run["status"]
            while status not in TERMINAL and time.monotonic() < deadline:
                time.sleep(0.2)
                current = call(rec, "run.get", "GET", f"{self.api}/runs/{run['id']}/", token)
                if current is not None:
                    status = current["status"]
            if status != "succeeded":
                rec.error("run.lifecycle", f"run {run['id']} ended {status}")
                continue
            rec.ok("run.lifecycle", time.perf_counter() - began)
            rec.count("runs_succeeded")
            time.sleep(self.think)

    def operator(self) -> None:
        token, rec = self.tokens["operator"], self.recorder
        while not (self.stop.is_set() and self.clients_done.is_set()):
            page = call(
                rec,
                "interrupts.list",
                "GET",
                f"{self.api}/interrupts/?state=pending&limit=50",
                token,
            )
            for interrupt in (page or {}).get("results", []):
                resolved = call(
                    rec,
                    "interrupt.resolve",
                    "POST",
                    f"{self.api}/interrupts/{interrupt['id']}/resolve/",
                    token,
                    {
                        "decision": "respond",
                        "response": {"note": "looks good"},
                        "reason": "soak operator",
                        "request_digest": interrupt["request_digest"],
                    },
                )
                if resolved is not None:
                    rec.count("interrupts_resolved")
            time.sleep(0.2)

    # WebSocket subscribers

    async def follow_run(self, run_id: str) -> None:
        from websockets.asyncio.client import connect

        rec = self.recorder
        url = self.profile.base.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after=0"
        headers = {"Authorization": f"Bearer {self.tokens['reader']}"}
        began = time.perf_counter()
        seqs: list[int] = []
        status = ""
        async with connect(url, additional_headers=headers, open_timeout=10) as ws:
            deadline = time.monotonic() + 120
            while status not in TERMINAL and time.monotonic() < deadline:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=120))
                if frame["type"] == "ready":
                    rec.ok("ws.ready", time.perf_counter() - began)
                elif frame["type"] == "event":
                    seqs.append(frame["event"]["seq"])
                elif frame["type"] == "run":
                    status = frame["run"]["status"]
        if status != "succeeded":
            rec.error("ws.run", f"run {run_id}: stream ended at status {status!r}")
            return
        if seqs != list(range(1, len(seqs) + 1)):
            rec.error("ws.run", f"run {run_id}: events {seqs} are not 1..n once each")
            return
        rec.ok("ws.run_stream", time.perf_counter() - began)
        rec.count("ws_events", len(seqs))
        rec.count("ws_run_streams")

    async def follow_session(self, session_id: str, seconds: float) -> None:
        from websockets.asyncio.client import connect

        rec = self.recorder
        url = self.profile.base.replace("http://", "ws://") + f"/ws/sessions/{session_id}/"
        headers = {"Authorization": f"Bearer {self.tokens['reader']}"}
        began = time.perf_counter()
        got: list[tuple[int, str]] = []
        async with connect(url, additional_headers=headers, open_timeout=10) as ws:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                try:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=0.5))
                except TimeoutError:
                    continue
                if frame["type"] == "ready":
                    rec.ok("ws.ready", time.perf_counter() - began)
                elif frame["type"] == "chunk":
                    chunk = frame["chunk"]
                    got.append((chunk["seq"], chunk["content"].get("text", "")))
        page = await asyncio.to_thread(
            call,
            rec,
            "chunks.read",
            "GET",
            f"{self.api}/sessions/{session_id}/chunks/?after=-1&limit=200",
            self.tokens["reader"],
        )
        if page is None:
            return
        stored = [(c["seq"], c["content"].get("text", "")) for c in page["results"]]
        if got != stored[: len(got)]:
            rec.error("ws.session", f"session {session_id}: received {got}, stored {stored}")
            return
        rec.count("ws_chunks", len(got))
        rec.count("ws_session_streams")

    async def subscriber(self, index: int) -> None:
        """Even subscribers follow runs, odd ones sessions: each time the newest one nobody
        followed yet (usually still in progress)."""
        pending = self.recent_runs if index % 2 == 0 else self.recent_sessions
        while not self.stop.is_set():
            try:
                object_id = pending.pop()
            except IndexError:
                await asyncio.sleep(0.2)
                continue
            try:
                if index % 2 == 0:
                    await self.follow_run(object_id)
                else:
                    await self.follow_session(object_id, 3.0)
            except Exception as exc:
                self.recorder.error("ws", f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    def subscribers_thread(self) -> None:
        async def main() -> None:
            await asyncio.gather(*(self.subscriber(i) for i in range(self.subscribers)))

        asyncio.run(main())

    # sampling

    def sampler(self) -> None:
        began = time.monotonic()
        while True:
            try:
                sample: dict[str, Any] = {"t": round(time.monotonic() - began, 1)}
                sample.update(sample_processes(self.profile))
                sample["database"] = sample_database(self.profile)
                self.samples.append(sample)
            except Exception as exc:
                self.recorder.error("sampler", f"{type(exc).__name__}: {exc}")
            if self.stop.wait(self.sample_seconds):
                return

    # the whole soak

    def run(self) -> float:
        self.mint_tokens()
        threads = [threading.Thread(target=self.sampler, name="sampler")]
        clients = [
            threading.Thread(target=self.session_client, args=(i,), name=f"sessions-{i}")
            for i in range(self.session_clients)
        ] + [
            threading.Thread(target=self.run_client, args=(i,), name=f"runs-{i}")
            for i in range(self.run_clients)
        ]
        threads += clients
        threads.append(threading.Thread(target=self.operator, name="operator"))
        if self.subscribers:
            threads.append(threading.Thread(target=self.subscribers_thread, name="ws"))
        began = time.monotonic()
        for thread in threads:
            thread.start()
        try:
            self.stop.wait(self.seconds)
        finally:
            self.stop.set()
            for thread in clients:  # each finishes (and checks) what it started
                thread.join(timeout=150)
            self.clients_done.set()
            for thread in threads:
                thread.join(timeout=150)
        stuck = [thread.name for thread in threads if thread.is_alive()]
        if stuck:
            self.recorder.error("soak", f"threads did not finish: {stuck}")
        return time.monotonic() - began


# --- Report ------------------------------------------------------------------------------------


def summarise(soak: Soak, elapsed: float, growth_limit: float) -> dict[str, Any]:
    rec = soak.recorder
    operations = {
        op: {
            "count": len(values),
            "p50_ms": percentile(values, 0.5) * 1000,
            "p99_ms": percentile(values, 0.99) * 1000,
        }
        for op, values in sorted(rec.latencies.items())
        if values
    }
    growth: dict[str, dict[str, Any]] = {}
    samples = soak.samples
    for name in (*PROCESSES, "database"):
        for metric in ("rss_mib", "fds", "pg_connections"):
            series = [s[name][metric] for s in samples if metric in s.get(name, {})]
            if not series:
                continue
            middle, last, grew = plateau(series, growth_limit, FLOORS[metric])
            growth[f"{name}.{metric}"] = {
                "first": series[0],
                "middle": middle,
                "last": last,
                "max": max(series),
                "grew": grew,
            }
    return {
        "seconds": elapsed,
        "runs_succeeded": rec.counts["runs_succeeded"],
        "sessions": rec.counts["sessions"],
        "interrupts_resolved": rec.counts["interrupts_resolved"],
        "ws_run_streams": rec.counts["ws_run_streams"],
        "ws_session_streams": rec.counts["ws_session_streams"],
        "ws_items": rec.counts["ws_events"] + rec.counts["ws_chunks"],
        "errors": len(rec.errors),
        "error_examples": rec.errors[:5],
        "operations": operations,
        "samples": len(samples),
        "growth": growth,
        "leaks": sorted(key for key, g in growth.items() if g["grew"]),
        "sample_series": samples,
    }


def render(result: dict[str, Any], config: dict[str, Any]) -> str:
    lines = [
        f"{config['minutes']:g} minutes on the production profile (uvicorn, Celery worker with "
        f"{config['concurrency']} processes and beat, Redis, PostgreSQL with separate roles, "
        f"SeaweedFS): {config['session_clients']} session clients (create, append, fork, append, "
        f"read), {config['run_clients']} run clients (`soak_review`: a draft, an approval "
        f"interrupt resolved over the API by a scripted operator, an idempotent effect), "
        f"{config['subscribers']} WebSocket subscribers (run streams to their end, session "
        f"streams for 3 s), think time {config['think']} s.\n",
        f"- runs succeeded: **{result['runs_succeeded']}**; sessions (with a fork each): "
        f"{result['sessions']}; interrupts resolved: {result['interrupts_resolved']}",
        f"- streams checked: {result['ws_run_streams']} run, {result['ws_session_streams']} "
        f"session ({result['ws_items']} items, each once and in order)",
        f"- errors: **{result['errors']}**"
        + (f" ({'; '.join(result['error_examples'])})" if result["errors"] else ""),
        f"- leak check (median of the last third vs the middle third of {result['samples']} "
        f"samples, every {config['sample_seconds']:g} s; growth > {config['growth_limit']:.0%} "
        f"and above {FLOORS['rss_mib']:g} MiB / {FLOORS['fds']:g} fds / "
        f"{FLOORS['pg_connections']:g} connections fails): "
        + ("**none grew**" if not result["leaks"] else f"**grew: {', '.join(result['leaks'])}**"),
        "",
        "| operation | count | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for op, row in result["operations"].items():
        lines.append(f"| {op} | {row['count']} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} |")
    lines += [
        "",
        "| process | metric | first | middle third (median) | last third (median) | max |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, g in result["growth"].items():
        name, metric = key.split(".")
        unit = {"rss_mib": "RSS MiB", "fds": "open fds", "pg_connections": "PG connections"}
        lines.append(
            f"| {name} | {unit[metric]} | {g['first']:.1f} | {g['middle']:.1f} | "
            f"{g['last']:.1f} | {g['max']:.1f} |"
        )
    lines.append(
        "\nworker = the Celery main process and its pool; PG connections per process are its "
        "sockets to the server (`/proc`), `database` the runtime role's rows in "
        "`pg_stat_activity`."
    )
    return "\n".join(lines) + "\n"


def run_soak(
    *,
    minutes: float = 10.0,
    session_clients: int = 3,
    run_clients: int = 3,
    subscribers: int = 4,
    sample_seconds: float = 5.0,
    growth_limit: float = 0.15,
    think: float = 0.05,
    concurrency: int = 2,
    admin_url: str = DEFAULT_ADMIN_URL,
    keep_dir: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the profile, soak, stop it and drop its database; (result, config)."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("the soak needs redis-server (production-local starts one)")
    run_dir = Path(tempfile.mkdtemp(prefix="openrath-soak-"))
    profile = Profile(run_dir, admin_url)
    profile.env["OPENRATH_LOCAL_CELERY_CONCURRENCY"] = str(concurrency)
    config = {
        "minutes": minutes,
        "session_clients": session_clients,
        "run_clients": run_clients,
        "subscribers": subscribers,
        "sample_seconds": sample_seconds,
        "growth_limit": growth_limit,
        "think": think,
        "concurrency": concurrency,
    }
    try:
        profile.start()
        soak = Soak(
            profile,
            seconds=minutes * 60,
            session_clients=session_clients,
            run_clients=run_clients,
            subscribers=subscribers,
            sample_seconds=sample_seconds,
            think=think,
        )
        elapsed = soak.run()
        for name in PROCESSES:
            if not Path(f"/proc/{profile.pid(name)}").exists():
                soak.recorder.error("soak", f"{name} exited during the soak")
        result = summarise(soak, elapsed, growth_limit)
    finally:
        profile.stop()
        with contextlib.suppress(Exception):
            profile.drop()
        if not keep_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    return result, config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--session-clients", type=int, default=3)
    parser.add_argument("--run-clients", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--growth-limit", type=float, default=0.15)
    parser.add_argument("--think", type=float, default=0.05, help="seconds between operations")
    parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--admin-url", default=os.environ.get("OPENRATH_LOCAL_PG_ADMIN_URL"))
    parser.add_argument("--keep-dir", action="store_true", help="keep logs in the run dir")
    parser.add_argument("--json", type=Path, help="also write the result (with samples) here")
    parser.add_argument("--quick", action="store_true", help="print only (no RESULTS.md)")
    args = parser.parse_args()
    result, config = run_soak(
        minutes=args.minutes,
        session_clients=args.session_clients,
        run_clients=args.run_clients,
        subscribers=args.subscribers,
        sample_seconds=args.sample_seconds,
        growth_limit=args.growth_limit,
        think=args.think,
        concurrency=args.concurrency,
        admin_url=args.admin_url or DEFAULT_ADMIN_URL,
        keep_dir=args.keep_dir,
    )
    body = render(result, config)
    print(body)
    if args.json:
        args.json.write_text(json.dumps({"config": config, "result": result}, indent=2))
    if not args.quick:
        command = "python benchmarks/soak.py" + (
            f" --minutes {args.minutes:g}" if args.minutes != 10 else ""
        )
        write_section("soak", "Soak (production profile)", body, command)
    if result["errors"] or result["leaks"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
