"""API latency and concurrency on the production profile (issue 20 item 6).

    python benchmarks/api_latency.py                         # this checkout, print the table
    python benchmarks/api_latency.py --before /tmp/h6-before --rounds 2 --write-results

Starts the production profile with ``deploy/bin/production-local`` of each checkout (PostgreSQL
with an owner and a runtime role, Redis, SeaweedFS, uvicorn, a Celery worker and beat), mints
tokens, and measures from clients on 127.0.0.1, each over one keep-alive connection:

* a simple authenticated write, one at a time: ``POST /api/v1/sessions/{id}/chunks/`` (one
  chunk), ``POST /api/v1/runs/`` and ``POST /api/v1/interrupts/{id}/resolve/``;
* 10 concurrent clients ``POST /api/v1/runs/``: p50/p99 and accepted runs per second;
* 100 WebSocket subscribers of one session: POST began -> chunk frame received, per subscriber;
* approval -> resumed step with Celery: resolve POST began -> the chunk the resumed step
  appends received over the session's WebSocket.

With ``--before DIR`` the same measurements run against a second checkout (a worktree of the
commit to compare with), alternating before/after for ``--rounds`` rounds in one run, so both
see the same machine load. Bounded in count (the ``--n*`` options) and in time
(``--max-seconds`` per phase). The web tier's process count is each checkout's default unless
``--web-workers`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    consecutive_free_ports,
    free_ports,
    percentile,
    write_section,
)

WORKFLOWS = "benchmarks.load_workflows,benchmarks.soak_workflows"
SUBSCRIBER_TOKENS = 4  # 25 sockets each: under the default per-principal WebSocket cap (50)


# --- The profile ------------------------------------------------------------------------------


class Profile:
    """One ``production-local`` instance of a checkout, on free ports and a throw-away DB."""

    def __init__(
        self, checkout: Path, label: str, web_workers: int | None, prefix: str = "openrath_api"
    ) -> None:
        self.checkout = checkout
        self.label = label
        slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"openrath-api-{slug}-"))
        web, s3, master, volume, filer, metrics = free_ports(6)
        self.port = web
        self.env = {
            **os.environ,
            "PYTHON": sys.executable,
            # The checkout's own packages, ahead of the editable install's (which names one
            # checkout only): every process production-local starts imports this checkout.
            "PYTHONPATH": str(checkout),
            "OPENRATH_LOCAL_DIR": str(self.run_dir),
            "OPENRATH_LOCAL_WEB_PORT": str(web),
            "OPENRATH_LOCAL_S3_PORT": str(s3),
            "OPENRATH_LOCAL_WEED_MASTER_PORT": str(master),
            "OPENRATH_LOCAL_WEED_VOLUME_PORT": str(volume),
            "OPENRATH_LOCAL_WEED_FILER_PORT": str(filer),
            "OPENRATH_LOCAL_WORKER_METRICS_PORT": str(metrics),
            "OPENRATH_LOCAL_WEED_GRPC_BASE": str(consecutive_free_ports(4)),
            "OPENRATH_LOCAL_DB": f"{prefix}_{slug}_{os.getpid()}",
            "OPENRATH_LOCAL_OWNER_ROLE": f"{prefix}_{slug}_owner",
            "OPENRATH_LOCAL_RUNTIME_ROLE": f"{prefix}_{slug}_app",
            "OPENRATH_LOCAL_CELERY_CONCURRENCY": "1",
            "OPENRATH_LOCAL_REDIS_DB": os.environ.get("OPENRATH_API_BENCH_REDIS_DB", "6"),
            "OPENRATH_WORKFLOW_MODULES": WORKFLOWS,
            "LOG_LEVEL": "WARNING",
            # The write rate limit is still checked on every request (its Redis round trip is
            # part of the latency measured), but set high enough that a phase's writes, faster
            # than a client's usual pace, are not refused with 429s.
            "OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE": "600000",
            "OPENRATH_RATE_LIMIT_BURST": "100000",
        }
        if web_workers is not None:
            self.env["OPENRATH_LOCAL_WEB_WORKERS"] = str(web_workers)
        self.env.pop("OPENRATH_WEB_WORKERS", None)

    @property
    def script(self) -> str:
        return str(self.checkout / "deploy" / "bin" / "production-local")

    def start(self) -> None:
        subprocess.run(
            [self.script, "start"],
            cwd=self.checkout,
            env=self.env,
            check=True,
            timeout=300,
            stdout=subprocess.DEVNULL,
        )

    def destroy(self) -> None:
        subprocess.run(
            [self.script, "destroy"],
            cwd=self.checkout,
            env=self.env,
            timeout=180,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )

    def web_processes(self) -> int:
        """The ASGI server processes that started (each logs "Started server process")."""
        log = (self.run_dir / "logs" / "web.log").read_text(errors="replace")
        return len(set(re.findall(r"Started server process \[(\d+)\]", log)))

    def manage(self, *args: str) -> str:
        env = dict(self.env)
        for line in (self.run_dir / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export ") :].partition("=")
                env[key] = value.strip("'")
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)}: {result.stderr[-2000:]}")
        return result.stdout.strip().splitlines()[-1]


# --- HTTP and WebSocket clients --------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection with one bearer token."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.connection.request(method, path, body=data, headers=headers)
                response = self.connection.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.connection.close()
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        try:
            return response.status, json.loads(raw or b"null")
        except ValueError:
            return response.status, raw[:300]

    def timed(self, method: str, path: str, body: Any, expect: int) -> tuple[float, Any]:
        started = time.perf_counter()
        status, reply = self.call(method, path, body)
        elapsed = time.perf_counter() - started
        if status != expect:
            raise RuntimeError(f"{method} {path}: {status} {reply!r:.300}")
        return elapsed, reply


def session_create(client: Client, text: str = "hello") -> str:
    status, reply = client.call(
        "POST", "/api/v1/sessions/", {"project": "bench", "user_message": text}
    )
    if status != 201:
        raise RuntimeError(f"session create: {status} {reply!r:.300}")
    return str(reply["id"])


def chunk_body(text: str) -> dict[str, Any]:
    return {"chunks": [{"role": "user", "content": {"text": text}}]}


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 0.5) * 1000,
        "p99": percentile(ordered, 0.99) * 1000,
    }


# --- The measurements -------------------------------------------------------------------------


def measure_chunks(port: int, token: str, n: int, warmup: int) -> dict[str, float]:
    client = Client(port, token)
    session = session_create(client)
    path = f"/api/v1/sessions/{session}/chunks/"
    samples = []
    for i in range(warmup + n):
        elapsed, _ = client.timed("POST", path, chunk_body(f"chunk {i}"), 201)
        if i >= warmup:
            samples.append(elapsed)
    return stats(samples)


def measure_runs(port: int, token: str, n: int, warmup: int) -> dict[str, float]:
    client = Client(port, token)
    sessions = [session_create(client, f"q{i}") for i in range(warmup + n)]
    samples = []
    for i, session in enumerate(sessions):
        body = {"workflow": "load_short", "project": "bench", "session": session}
        elapsed, _ = client.timed("POST", "/api/v1/runs/", body, 201)
        if i >= warmup:
            samples.append(elapsed)
    return stats(samples)


def measure_concurrent_runs(
    port: int, tokens: list[str], per_client: int, max_seconds: float
) -> dict[str, float]:
    clients = [Client(port, token) for token in tokens]
    plans = [[session_create(c, f"c{i}") for i in range(per_client)] for c in clients]
    samples: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(clients) + 1)
    deadline = time.monotonic() + max_seconds

    def work(client: Client, sessions: list[str]) -> None:
        barrier.wait()
        for session in sessions:
            if time.monotonic() > deadline:
                return
            body = {"workflow": "load_short", "project": "bench", "session": session}
            try:
                elapsed, _ = client.timed("POST", "/api/v1/runs/", body, 201)
            except RuntimeError as exc:
                with lock:
                    errors.append(str(exc)[:200])
                continue
            with lock:
                samples.append(elapsed)

    threads = [
        threading.Thread(target=work, args=(c, s)) for c, s in zip(clients, plans, strict=True)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    return {**stats(samples), "per_s": len(samples) / wall, "errors": len(errors)}


async def _subscriber(
    port: int, token: str, session: str, ready: asyncio.Event, want: int, out: list[Any]
) -> None:
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{port}/ws/sessions/{session}/"
    async with connect(
        url, additional_headers={"Authorization": f"Bearer {token}"}, max_queue=None
    ) as socket_:
        seen = 0
        while seen < want:
            frame = json.loads(await socket_.recv())
            if frame["type"] == "ready":
                ready.set()
            elif frame["type"] == "chunk":
                out.append((frame["chunk"]["seq"], time.perf_counter()))
                seen += 1


def measure_fanout(
    port: int, writer_token: str, reader_tokens: list[str], subscribers: int, chunks: int
) -> dict[str, float]:
    writer = Client(port, writer_token)
    session = session_create(writer)  # seq 0: the user message
    began: dict[int, float] = {}
    arrivals: list[Any] = []

    def write() -> None:
        for i in range(chunks):
            started = time.perf_counter()
            _, reply = writer.timed(
                "POST", f"/api/v1/sessions/{session}/chunks/", chunk_body(f"c{i}"), 201
            )
            began[int(reply[0]["seq"])] = started
            time.sleep(0.05)  # one chunk every ~50 ms: a steady stream, not a burst

    async def scenario() -> None:
        readies = [asyncio.Event() for _ in range(subscribers)]
        tasks = [
            asyncio.create_task(
                _subscriber(
                    port,
                    reader_tokens[i % len(reader_tokens)],
                    session,
                    readies[i],
                    chunks + 1,  # the replayed user message too
                    arrivals,
                )
            )
            for i in range(subscribers)
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        await asyncio.wait_for(asyncio.gather(asyncio.to_thread(write), *tasks), 120)

    asyncio.run(scenario())
    samples = [max(0.0, at - began[seq]) for seq, at in arrivals if seq in began]
    if len(samples) != subscribers * chunks:
        raise RuntimeError(f"fan-out: {len(samples)} of {subscribers * chunks} frames matched")
    return stats(samples)


def measure_resolve(
    port: int, token: str, reader_token: str, n: int, max_seconds: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Resolve POST time, and resolve POST began -> the resumed step's chunk over WebSocket."""
    client = Client(port, token)
    session_of_run: dict[str, str] = {}
    for i in range(n):
        session = session_create(client, f"r{i}")
        status, run = client.call(
            "POST",
            "/api/v1/runs/",
            {"workflow": "soak_review", "project": "bench", "session": session},
        )
        if status != 201:
            raise RuntimeError(f"run create: {status} {run!r:.300}")
        session_of_run[str(run["id"])] = str(run["session"])  # the run's own session
    pending: list[dict[str, Any]] = []
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        status, page = client.call("GET", "/api/v1/interrupts/?status=pending&limit=100")
        if status != 200:
            raise RuntimeError(f"interrupt list: {status} {page!r:.300}")
        pending = [i for i in page["results"] if str(i["run"]) in session_of_run]
        if len(pending) >= n:
            break
        time.sleep(0.2)
    if len(pending) < n:
        raise RuntimeError(f"only {len(pending)} of {n} runs reached their interrupt")
    resolve_samples: list[float] = []
    resume_samples: list[float] = []

    async def one(interrupt: dict[str, Any]) -> None:
        from websockets.asyncio.client import connect

        session = session_of_run[str(interrupt["run"])]
        url = f"ws://127.0.0.1:{port}/ws/sessions/{session}/"
        async with connect(
            url, additional_headers={"Authorization": f"Bearer {reader_token}"}
        ) as socket_:
            while json.loads(await socket_.recv())["type"] != "ready":
                pass
            started = time.perf_counter()
            body = {
                "decision": "approve",
                "response": {"note": "ok"},
                "request_digest": interrupt["request_digest"],
            }
            elapsed, _ = await asyncio.to_thread(
                client.timed, "POST", f"/api/v1/interrupts/{interrupt['id']}/resolve/", body, 200
            )
            resolve_samples.append(elapsed)
            while True:
                frame = json.loads(await asyncio.wait_for(socket_.recv(), 60))
                if frame["type"] == "chunk" and str(
                    frame["chunk"]["content"].get("text", "")
                ).startswith("published"):
                    resume_samples.append(time.perf_counter() - started)
                    return

    async def all_of_them() -> None:
        for interrupt in pending[:n]:
            await one(interrupt)

    asyncio.run(all_of_them())
    return stats(resolve_samples), stats(resume_samples)


def measure_profile(profile: Profile, args: argparse.Namespace) -> dict[str, Any]:
    profile.start()
    try:
        profile.manage("create_tenant", "bench")
        profile.manage("create_project", "bench", "bench")
        writes = (
            "sessions:read,sessions:write,runs:read,runs:write,interrupts:read,interrupts:resolve"
        )

        def token(name: str, grants: str = writes) -> str:
            return profile.manage("create_token", "bench", "--grants", grants, "--name", name)

        port = profile.port
        result: dict[str, Any] = {"label": profile.label, "web": profile.web_processes()}
        result["chunks"] = measure_chunks(port, token("chunks"), args.n_writes, args.warmup)
        result["runs"] = measure_runs(port, token("runs"), args.n_writes, args.warmup)
        readers = [token(f"reader-{i}", "sessions:read") for i in range(SUBSCRIBER_TOKENS)]
        result["resolve"], result["resume"] = measure_resolve(
            port, token("resolve"), readers[0], args.n_resolve, args.max_seconds
        )
        result["concurrent"] = measure_concurrent_runs(
            port, [token(f"client-{i}") for i in range(10)], args.n_per_client, args.max_seconds
        )
        result["fanout"] = measure_fanout(
            port, token("fanout"), readers, args.subscribers, args.n_fanout
        )
        return result
    finally:
        profile.destroy()


# --- Report -----------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| checkout, round | web processes | chunk POST p50 / p99 ms | run POST p50 / p99 ms | "
        "resolve POST p50 / p99 ms | 10 clients run POST p50 / p99 ms | runs/s | "
        "100 subscribers p50 / p99 ms | approval -> resumed step p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:

        def pair(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[key]['p50']:.1f} / {r[key]['p99']:.1f}"

        lines.append(
            f"| {r['label']}, {r['round']} | {r['web']} | {pair('chunks')} | {pair('runs')} | "
            f"{pair('resolve')} | {pair('concurrent')} | {r['concurrent']['per_s']:.1f} | "
            f"{pair('fanout')} | {pair('resume')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="a checkout to compare with (a worktree)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--web-workers", type=int, default=None)
    parser.add_argument("--n-writes", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--n-resolve", type=int, default=20)
    parser.add_argument("--n-per-client", type=int, default=20)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--n-fanout", type=int, default=40)
    parser.add_argument("--max-seconds", type=float, default=120)
    parser.add_argument(
        "--after-single",
        action="store_true",
        help="also measure this checkout with one web process (the per-process cost)",
    )
    parser.add_argument(
        "--db-prefix",
        default="openrath_api",
        help="prefix of the throw-away database's and roles' names (two runs at once need two)",
    )
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,30}", args.db_prefix):
        parser.error("--db-prefix: a lower-case identifier of at most 31 characters")
    checkouts: list[tuple[str, Path, int | None]] = [("after", REPO, args.web_workers)]
    if args.before is not None:
        checkouts.insert(0, ("before", args.before.resolve(), args.web_workers))
    if args.after_single:
        checkouts.append(("after, 1 process", REPO, 1))
    results = []
    for round_ in range(1, args.rounds + 1):
        for label, checkout, web_workers in checkouts:
            print(f"round {round_}: {label} ({checkout})", file=sys.stderr, flush=True)
            result = measure_profile(Profile(checkout, label, web_workers, args.db_prefix), args)
            result["round"] = round_
            results.append(result)
            print(table([result]).splitlines()[-1], file=sys.stderr, flush=True)
    body = (
        "Production profile (`deploy/bin/production-local`: uvicorn, one Celery worker process "
        "and beat, Redis, PostgreSQL with separate roles, SeaweedFS) with the clients on "
        f"127.0.0.1, each over one keep-alive connection. Writes one at a time: {args.n_writes} "
        f"of each after {args.warmup} warm-up requests (a chunk POST appends one chunk; a run "
        f"POST starts the 3-step `load_short` on a session of its own; {args.n_resolve} "
        "approvals of `soak_review`). 10 clients with their own tokens POST "
        f"{args.n_per_client} runs each at once. {args.subscribers} WebSocket subscribers of one "
        f"session, {args.n_fanout} chunks POSTed ~50 ms apart: POST began -> frame received, "
        "every subscriber and chunk. Approval -> resumed step: resolve POST began -> the "
        "resumed step's chunk over the session's WebSocket (Celery). "
        "Web processes: each checkout's production default (one per CPU since issue 20), "
        "as counted from uvicorn's log. "
        "before = the commit before this work (a git worktree), after = this checkout; "
        "alternated in one run on a machine shared with other jobs (2 cores, not quiet): "
        "compare rows of the same run.\n\n" + table(results) + "\n"
    )
    print(body)
    if args.write_results:
        given = [
            "<worktree of the commit before>" if args.before and a == str(args.before) else a
            for a in sys.argv[1:]
        ]
        command = " ".join(["python benchmarks/api_latency.py", *given])
        write_section("api-latency", "API latency (issue 20 item 6)", body, command)


if __name__ == "__main__":
    main()
