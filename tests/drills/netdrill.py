"""The network fault drills: worker hosts in network namespaces against the production profile,
faults on their links, a recorded history and a checker (``deploy/bin/drill-net``; a short
version runs in the suite: ``tests/drills/test_network_drills.py``).

Set-up, all private to the drill: a PostgreSQL cluster and a ``redis-server`` of its own,
``deploy/bin/production-local`` on them (database and roles, migrations, SeaweedFS, the ASGI
server, Celery beat; its root-namespace Celery worker is stopped, so every worker is on a host
of the bed), three hosts (``tests/drills/netbed.py``): ``w1`` and ``w2`` run ``manage.py
run_worker``, ``w3`` a Celery worker; each reaches PostgreSQL, Redis and S3 only through the
fault relay on its gateway, and the effect target there directly.

Each fault: submit a batch of runs over the API (``net_effects``; ``net_approval`` for the
interrupt faults, ``net_artifacts`` for the S3 ones), wait until the faulted host holds one,
inject the fault for a bounded time, heal it, wait for every run of the batch to finish. The
approval runs all wait for a person first: the drill's operator (in the root namespace, over the
API, as a person would) resolves them one by one until the faulted host holds a resumed one,
then the rest while the fault is on, and asks once more for each with another decision (a 409).
After the last fault the history is read from the database, the target and S3 and judged by
``tests/drills/history.py``. Prints one JSON document (runs, faults, violations, recovery
times, resolution-to-resume times); exit status 0 when nothing was violated, 1 when
something was, 77 when the machine cannot run the bed (not root, no nftables).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import free_ports, write_section
from tests.drills import history as hist
from tests.drills import net_workflows
from tests.drills.netbed import EffectTarget, FaultProxy, Netbed, missing_tools, sweep
from tests.support import REPO

HOSTS = ("w1", "w2", "w3")
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "needs_review"}
#: Only a failing drill waits this long for something that must happen.
WAIT = 180.0


def host_of(worker: str) -> str:
    """The host of a lease owner: ``w1-0`` (``run_worker --name w1``, thread 0) or
    ``celery:w3:<pid>:<thread>`` (a Celery worker on the host named ``w3``)."""
    if worker.startswith("celery:"):
        return worker.split(":")[1]
    return worker.rsplit("-", 1)[0]


@dataclass(frozen=True)
class FaultSpec:
    name: str
    host: str
    seconds: float
    inject: Callable[[], None]
    heal: Callable[[], None]
    #: The batch's workflow: ``net_effects``, ``net_approval`` or ``net_artifacts``.
    workflow: str = "net_effects"


class Drill:
    def __init__(self, tmp: Path, *, lease_seconds: int, step_seconds: float) -> None:
        self.tmp = tmp
        self.lease_seconds = lease_seconds
        self.step_seconds = step_seconds
        self.stack = contextlib.ExitStack()
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.submissions: list[hist.Submission] = []
        self.faults: list[hist.Fault] = []
        self.resolutions: list[hist.Resolution] = []
        self.log: list[str] = []
        self.restarts: Counter[str] = Counter()
        #: fault name -> most runtime sessions seen idle in a transaction for over a lease
        self.stale: dict[str, int] = {}
        #: fault name -> seconds from the heal until every run of its batch finished
        self.batch_done: dict[str, float] = {}
        #: fault name -> its batch's step retries for an unavailable artifact store
        self.storage_retries: dict[str, int] = {}
        self.stopping = threading.Event()

    def note(self, text: str) -> None:
        line = f"[drill-net {time.strftime('%H:%M:%S')}] {text}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        from tests.drills.test_outage_drills import (
            DRILL_ENV,
            PrivatePostgres,
            PrivateRedis,
            Profile,
        )

        self.postgres = PrivatePostgres()
        self.stack.callback(self.postgres.destroy)
        self.postgres.init()
        self.postgres.start()
        self.redis = PrivateRedis(self.tmp / "redis")
        self.stack.callback(self.redis.stop)
        self.redis.start()
        extra = {
            **DRILL_ENV,
            "OPENRATH_WORKFLOW_MODULES": net_workflows.__name__,
            "OPENRATH_LEASE_SECONDS": str(self.lease_seconds),
            # the drill's leases are short: a lost session's row locks go as soon (settings.py)
            "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS": os.environ.get(
                "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", str(self.lease_seconds * 1000)
            ),
        }
        self.profile = Profile(
            self.tmp, admin_url=self.postgres.admin_url, redis=self.redis, extra=extra
        )
        self.stack.callback(self.profile.stop)
        self.note("starting the production profile (private PostgreSQL and Redis)")
        self.profile.start()
        self.profile.kill("worker")  # every worker runs on a host of the bed
        self.s3_port = int(self.profile.env["OPENRATH_LOCAL_S3_PORT"])
        self.bed = Netbed(list(HOSTS))
        self.stack.callback(self.bed.down)
        self.bed.up()
        self.proxy = FaultProxy()
        self.stack.callback(self.proxy.close)
        for host in self.bed.hosts.values():
            for service, port in self.ports.items():
                self.proxy.add(f"{host.name}/{service}", (host.gateway, port), ("127.0.0.1", port))
        self.target_port = free_ports(1)[0]
        self.target = EffectTarget([h.gateway for h in self.bed.hosts.values()], self.target_port)
        self.stack.callback(self.target.close)
        self.stack.callback(self.stop_workers)
        for name in HOSTS:
            self.start_worker(name)
        threading.Thread(target=self.supervise, daemon=True).start()
        self.note(f"bed up: hosts {', '.join(HOSTS)} (namespaces {self.bed.tag})")

    @property
    def ports(self) -> dict[str, int]:
        return {"pg": self.postgres.port, "redis": self.redis.port, "s3": self.s3_port}

    def worker_env(self, name: str) -> dict[str, str]:
        host = self.bed.hosts[name]
        env = dict(self.profile.env)
        for line in (self.profile.run_dir / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export ") :].partition("=")
                env[key] = value.strip("'")
        env.pop("MIGRATION_DATABASE_URL", None)
        for key in ("DATABASE_URL", "REDIS_URL", "S3_ENDPOINT_URL"):
            env[key] = env[key].replace("127.0.0.1:", f"{host.gateway}:")
        env["OPENRATH_DRILL_TARGET"] = f"http://{host.gateway}:{self.target_port}"
        env["PYTHONPATH"] = str(REPO)
        return env

    def start_worker(self, name: str) -> None:
        host = self.bed.hosts[name]
        if name == "w3":
            argv = [
                sys.executable, "-m", "celery", "-A", "openrath_project", "worker",
                "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
                "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                "--without-heartbeat",
            ]  # fmt: skip
        else:
            argv = [sys.executable, "manage.py", "run_worker", "--poll", "0.2", "--name", name]
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the drill
        self.stack.callback(log.close)
        self.workers[name] = subprocess.Popen(
            host.exec_args(argv),
            cwd=REPO,
            env=self.worker_env(name),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def supervise(self) -> None:
        """Restart a worker that exited, as systemd (``Restart=always``) or Kubernetes would: a
        worker whose step cannot be stopped after its lease is lost exits on purpose."""
        while not self.stopping.wait(0.5):
            for name, process in list(self.workers.items()):
                if process.poll() is not None and not self.stopping.is_set():
                    self.restarts[name] += 1
                    self.note(f"{name} exited ({process.returncode}); restarting it")
                    self.start_worker(name)

    def stop_workers(self) -> None:
        self.stopping.set()
        for process in self.workers.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)

    # --- faults ----------------------------------------------------------------------------

    def faults_for(self, *, short: bool, seconds: float) -> list[FaultSpec]:
        bed, proxy, pg, redis = self.bed, self.proxy, self.ports["pg"], self.ports["redis"]
        s3 = self.ports["s3"]

        def flap(host: str) -> Callable[[], None]:
            def inject() -> None:
                deadline = time.monotonic() + seconds
                down = False
                while time.monotonic() < deadline:
                    if down:
                        bed.heal(host)
                    else:
                        bed.drop(host, pg)
                    down = not down
                    time.sleep(1.0)

            return inject

        def cut(host: str, *ports: int, **how: Any) -> tuple[Callable[[], None], ...]:
            def inject() -> None:
                for port in ports:
                    bed.drop(host, port, **how)

            return inject, lambda: bed.heal(host)

        def relay(name: str, **fault: Any) -> tuple[Callable[[], None], ...]:
            return (lambda: proxy.set(name, **fault)), (lambda: proxy.set(name))

        def spec(name: str, host: str, how: tuple[Callable[[], None], ...], **kw: Any) -> FaultSpec:
            return FaultSpec(
                name, host, kw.get("seconds", seconds), how[0], how[1],
                kw.get("workflow", "net_effects"),
            )  # fmt: skip

        approval, artifacts = {"workflow": "net_approval"}, {"workflow": "net_artifacts"}

        specs = [
            spec("pg-partition", "w1", cut("w1", pg)),
            spec("pg-blackhole", "w2", relay("w2/pg", mode="blackhole")),
            spec("pg-latency-200-2000ms", "w3", relay("w3/pg", latency=(0.2, 2.0))),
            spec("approval-pg-partition", "w1", cut("w1", pg), **approval),
            spec("s3-partition", "w2", cut("w2", s3), **artifacts),
        ]
        if short:
            return specs
        return [
            *specs,
            spec("redis-partition", "w3", cut("w3", redis)),
            spec("pg-replies-dropped", "w1", cut("w1", pg, direction="in")),
            spec("pg-requests-dropped", "w2", cut("w2", pg, direction="out")),
            spec("pg-redis-loss-20pct", "w3", cut("w3", pg, redis, percent=20)),
            spec("pg-loss-5pct", "w1", cut("w1", pg, percent=5)),
            spec("pg-loss-30pct", "w2", cut("w2", pg, percent=30)),
            spec("pg-reset", "w2", relay("w2/pg", mode="reset")),
            spec("pg-flap-1s", "w1", (flap("w1"), lambda: bed.heal("w1")), seconds=0.0),
            spec("redis-blackhole", "w3", relay("w3/redis", mode="blackhole")),
            spec("pg-partition-40s", "w2", cut("w2", pg), seconds=40.0),
            spec("pg-blackhole-40s", "w1", relay("w1/pg", mode="blackhole"), seconds=40.0),
            spec("approval-pg-blackhole", "w2", relay("w2/pg", mode="blackhole"), **approval),
            spec("approval-redis-partition", "w3", cut("w3", redis), **approval),
            spec("s3-blackhole", "w2", relay("w2/s3", mode="blackhole"), **artifacts),
            spec("s3-latency-200-2000ms", "w3", relay("w3/s3", latency=(0.2, 2.0)), **artifacts),
            spec("s3-reset", "w1", relay("w1/s3", mode="reset"), **artifacts),
            spec(
                "s3-blackhole-40s",
                "w3",
                relay("w3/s3", mode="blackhole"),
                seconds=40.0,
                **artifacts,
            ),
        ]

    def held_by(self, host: str, run_ids: list[str]) -> list[str]:
        """The runs of ``run_ids`` a worker of ``host`` holds."""
        rows = self.profile.sql(
            "SELECT id::text, lease_owner FROM runs_app_run"
            " WHERE status = 'running' AND id = ANY(%s::uuid[])",
            run_ids,
        )
        return [run for run, owner in rows if host_of(owner) == host]

    def submit(self, count: int, workflow: str = "net_effects") -> list[str]:
        ids = []
        for _ in range(count):
            run = self.profile.start_run(workflow, {"step_seconds": self.step_seconds, "hold": 0.3})
            ids.append(run["id"])
            self.submissions.append(hist.Submission(run["id"], time.time(), workflow))
        return ids

    def wait_terminal(
        self, run_ids: list[str], timeout: float, *, resolve: str = ""
    ) -> dict[str, int]:
        """Wait until every run of ``run_ids`` finished (bounded); with ``resolve`` (a fault's
        name) the operator resolves what still waits (a resolve that got no answer)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = dict(self.profile.statuses(run_ids))
            if sum(counts.get(s, 0) for s in TERMINAL) == len(run_ids):
                return counts
            if time.monotonic() > deadline:
                return counts
            if resolve and counts.get("waiting"):
                for interrupt in self.pending(run_ids):
                    self.resolve(interrupt, resolve, "after")
            time.sleep(0.5)

    # --- the operator (interrupts) ---------------------------------------------------------

    def pending(self, run_ids: list[str]) -> list[dict[str, Any]]:
        """The pending interrupts of ``run_ids``, as the API lists them."""
        status, page = self.profile.request("GET", "/api/v1/interrupts/?state=pending&limit=200")
        if status != 200:
            return []
        wanted = set(run_ids)
        return [i for i in page.get("results", []) if i["run"] in wanted]

    def resolve(self, interrupt: dict[str, Any], fault: str, phase: str) -> None:
        """Approve ``interrupt`` over the API, then ask again with another decision (which must
        be a 409): both requests, who decided and their HTTP statuses go into the history."""
        for decision in ("approve", "reject"):
            status, body = self.profile.request(
                "POST",
                f"/api/v1/interrupts/{interrupt['id']}/resolve/",
                {
                    "decision": decision,
                    "reason": f"drill operator ({fault}, {phase})",
                    "request_digest": interrupt["request_digest"],
                },
            )
            by = str(body.get("resolved_by", "")) if status == 200 and body else ""
            self.resolutions.append(
                hist.Resolution(
                    interrupt["id"], interrupt["run"], decision, status, time.time(), by,
                    fault, phase,
                )
            )  # fmt: skip

    def all_pending(self, run_ids: list[str], timeout: float) -> list[dict[str, Any]]:
        """Wait until every run of ``run_ids`` waits for its interrupt (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            pending = self.pending(run_ids)
            if len(pending) >= len(run_ids) or time.monotonic() > deadline:
                return pending
            time.sleep(0.3)

    # --- one fault -------------------------------------------------------------------------

    def run_fault(self, spec: FaultSpec, batch: int) -> None:
        run_ids = self.submit(batch, spec.workflow)
        queue: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        held: list[str] = []
        if spec.workflow == "net_approval":
            queue = self.all_pending(run_ids, 60)
            # resolve one at a time until the faulted host holds a resumed run
            while queue and not held and time.monotonic() < deadline:
                self.resolve(queue.pop(0), spec.name, "before")
                wait = time.monotonic() + 1.0
                while not held and time.monotonic() < wait:
                    held = self.held_by(spec.host, run_ids)
                    time.sleep(0.1)
        while time.monotonic() < deadline and not held:
            held = self.held_by(spec.host, run_ids)
            if not held:
                time.sleep(0.1)
        # The fault's start comes before the last look at what the host holds: a run it holds
        # then commits its next step after the start (a run that finished in between would
        # otherwise count as caught and never moving again).
        started = time.time()
        held = self.held_by(spec.host, run_ids)
        self.note(f"{spec.name} on {spec.host} for {spec.seconds or 'flap'}s (holds {len(held)})")
        spec.inject()
        stale = 0
        began = time.monotonic()
        until = began + spec.seconds
        total = len(queue)
        every = spec.seconds / (total + 1)
        while time.monotonic() < until:
            stale = max(stale, self.stale_sessions())
            # the rest of the interrupts, spread over the fault
            while queue and time.monotonic() >= began + every * (total - len(queue) + 1):
                self.resolve(queue.pop(0), spec.name, "during")
            time.sleep(min(0.2, max(0.0, until - time.monotonic())))
        self.stale[spec.name] = stale
        spec.heal()
        healed = time.time()
        self.faults.append(hist.Fault(spec.name, spec.host, started, healed, tuple(held)))
        for interrupt in queue:
            self.resolve(interrupt, spec.name, "after")
        counts = self.wait_terminal(run_ids, WAIT, resolve=spec.name)
        self.batch_done[spec.name] = time.time() - healed
        self.storage_retries[spec.name] = int(
            self.profile.sql(
                "SELECT count(*) FROM runs_app_runevent WHERE run_id = ANY(%s::uuid[])"
                " AND type = 'step.retry_scheduled' AND data->>'code' = 'storage_unavailable'",
                run_ids,
            )[0][0]
        )
        self.note(f"{spec.name} healed; batch {counts} after {time.time() - healed:.1f}s")
        # The faulted host must work again: when the batch ran out before it claimed anything
        # after the heal, small probe batches give it something to claim (bounded).
        probes: list[str] = []
        deadline = time.monotonic() + 90
        while not self.claimed_since(spec.host, healed) and time.monotonic() < deadline:
            probes += self.submit(3)
            self.wait_terminal(probes, 30)
        if probes:
            self.note(f"{spec.host} probed with {len(probes)} more runs")
            self.wait_terminal(probes, WAIT)

    def stale_sessions(self) -> int:
        """Runtime sessions idle in a transaction for longer than a lease (a lost client's)."""
        rows = self.profile.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND datname = current_database()"
            " AND now() - state_change > make_interval(secs => %s)",
            self.lease_seconds,
        )
        return int(rows[0][0])

    def claimed_since(self, host: str, since: float) -> bool:
        rows = self.profile.sql(
            "SELECT data->>'worker' FROM runs_app_runevent"
            " WHERE type = 'run.claimed' AND created_at >= to_timestamp(%s)",
            since,
        )
        return any(host_of(worker) == host for (worker,) in rows)

    # --- history ---------------------------------------------------------------------------

    def history(self) -> hist.History:
        runs = [s.run for s in self.submissions]
        sql = self.profile.sql
        history = hist.History(
            steps=net_workflows.STEPS,
            effects=("charge", "notify"),
            chunk_text=net_workflows.chunk_text,
            host_of=host_of,
            submissions=list(self.submissions),
            faults=list(self.faults),
            workflows={
                "net_approval": (net_workflows.APPROVAL_STEPS, ()),
                "net_artifacts": (net_workflows.ARTIFACT_STEPS, ()),
            },
            resolutions=list(self.resolutions),
        )
        for iid, run, step, status, decision, by, at, events in sql(
            "SELECT i.id::text, i.run_id::text, i.step, i.status, i.decision, i.resolved_by,"
            " extract(epoch FROM i.resolved_at),"
            " array_remove(array_agg(e.seq ORDER BY e.seq), NULL)"
            " FROM runs_app_interrupt i LEFT JOIN runs_app_runevent e ON e.run_id = i.run_id"
            "  AND e.type = 'interrupt.resolved' AND e.data->>'interrupt' = i.id::text"
            " WHERE i.run_id = ANY(%s::uuid[]) GROUP BY i.id",
            runs,
        ):
            history.interrupts.append(
                hist.InterruptRecord(
                    iid, run, step, status, decision, by,
                    None if at is None else float(at), tuple(events),
                )
            )  # fmt: skip
        history.artifacts += self.artifact_reads(runs)
        for run, seq, token, worker, at in sql(
            "SELECT run_id::text, seq, (data->>'token')::bigint, data->>'worker',"
            " extract(epoch FROM created_at) FROM runs_app_runevent"
            " WHERE type = 'run.claimed' AND run_id = ANY(%s::uuid[])",
            runs,
        ):
            history.claims.append(hist.Claim(run, seq, token, worker, float(at)))
        for run, seq, checkpoint, step, token, at in sql(
            "SELECT e.run_id::text, e.seq, c.seq, c.step, c.fencing_token,"
            " extract(epoch FROM c.created_at) FROM runs_app_runevent e"
            " JOIN runs_app_checkpoint c ON c.run_id = e.run_id"
            "  AND c.seq = (e.data->>'checkpoint')::int"
            " WHERE e.type = 'step.completed' AND e.run_id = ANY(%s::uuid[])",
            runs,
        ):
            history.commits.append(hist.Commit(run, seq, checkpoint, step, token, float(at)))
        for run, status, session, reason in sql(
            "SELECT id::text, status, coalesce(session_id::text, ''), review_reason"
            " FROM runs_app_run WHERE id = ANY(%s::uuid[])",
            runs,
        ):
            history.outcomes.append(hist.Outcome(run, status, session, reason))
        history.chunks += self.logical_chunks([o.session for o in history.outcomes if o.session])
        for run, key, idem, klass, status in sql(
            "SELECT run_id::text, key, idempotency_key, effect_class, status"
            " FROM effects_app_effectrecord WHERE run_id = ANY(%s::uuid[])",
            runs,
        ):
            history.ledger.append(hist.LedgerEffect(run, key, idem, klass, status))
        for call in self.target.snapshot():
            history.target.append(
                hist.TargetCall(call.key, call.kind, call.run, call.effect, call.applied, call.at)
            )
        return history

    def logical_chunks(self, sessions: list[str]) -> list[hist.Chunk]:
        """Each session's logical chunk log: a session stores only its own chunks, at positions
        ``[base_len, base_len + own_len)``, after its base's first ``base_len`` (recursively; a
        run's next attempt after an abandoned one continues on such a fork)."""
        links: dict[str, tuple[str, int, int]] = {}
        frontier = set(sessions)
        while frontier:
            for session, base, base_len, own_len in self.profile.sql(
                "SELECT id::text, coalesce(base_id::text, ''), base_len, own_len"
                " FROM sessions_app_session WHERE id = ANY(%s::uuid[])",
                list(frontier),
            ):
                links[session] = (base, int(base_len), int(own_len))
            frontier = {base for base, _, _ in links.values() if base and base not in links}
        own: dict[str, dict[int, str]] = {}
        for session, seq, text in self.profile.sql(
            "SELECT session_id::text, seq, content->>'text' FROM sessions_app_chunk"
            " WHERE session_id = ANY(%s::uuid[])",
            list(links),
        ):
            own.setdefault(session, {})[int(seq)] = text or ""
        chunks = []
        for session in sessions:
            pieces: list[list[hist.Chunk]] = []
            link, cap = session, None
            while link in links:
                base, base_len, own_len = links[link]
                stop = base_len + own_len if cap is None else min(cap, base_len + own_len)
                held = own.get(link, {})
                pieces.append(
                    [hist.Chunk(session, q, held[q]) for q in sorted(held) if base_len <= q < stop]
                )
                cap, link = min(stop, base_len), base
            for piece in reversed(pieces):
                chunks += piece
        return chunks

    def artifact_reads(self, runs: list[str]) -> list[hist.ArtifactRead]:
        """Every artifact a committed checkpoint of ``runs`` references, read back from S3 (in
        the root namespace, past the relays) and checked against its digest."""
        import hashlib

        import boto3
        from botocore.config import Config

        env = self.profile_env()
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.s3_port}",
            aws_access_key_id=env["S3_ACCESS_KEY_ID"],
            aws_secret_access_key=env["S3_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
        )
        bucket = env.get("S3_BUCKET", "openrath")
        checked: dict[str, tuple[bool, str]] = {}
        reads = []
        for run, seq, state, tenant in self.profile.sql(
            "SELECT c.run_id::text, c.seq, c.state, r.tenant_id::text FROM runs_app_checkpoint c"
            " JOIN runs_app_run r ON r.id = c.run_id WHERE c.run_id = ANY(%s::uuid[])",
            runs,
        ):
            for digest in artifact_digests(state):
                key = f"artifacts/{tenant}/{digest[:2]}/{digest}"
                if key not in checked:
                    try:
                        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                    except Exception as exc:
                        checked[key] = (False, f"{type(exc).__name__}: {exc}"[:200])
                    else:
                        actual = hashlib.sha256(body).hexdigest()
                        checked[key] = (actual == digest, "" if actual == digest else actual)
                readable, detail = checked[key]
                reads.append(hist.ArtifactRead(run, seq, digest, readable, detail))
        return reads

    def profile_env(self) -> dict[str, str]:
        env = {}
        for line in (self.profile.run_dir / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export ") :].partition("=")
                env[key] = value.strip("'")
        return env

    def alive(self) -> dict[str, bool]:
        return {name: process.poll() is None for name, process in self.workers.items()}

    def log_tails(self) -> dict[str, str]:
        tails = {}
        for name in HOSTS:
            path = self.tmp / f"{name}.log"
            with contextlib.suppress(OSError):
                tails[name] = path.read_text(errors="replace")[-3000:]
        return tails


def longest_stall(history: hist.History, fault: hist.Fault) -> float:
    """The longest a run the fault caught went without a claim or a step commit, from the
    fault's start on (a step stuck on a hung connection shows here even when the run then
    finished on the same host)."""
    longest = 0.0
    for run in fault.runs:
        times = sorted(
            [fault.started]
            + [c.at for c in history.claims if c.run == run and c.at > fault.started]
            + [c.at for c in history.commits if c.run == run and c.at > fault.started]
        )
        longest = max([longest, *(b - a for a, b in zip(times, times[1:], strict=False))])
    return longest


def artifact_digests(value: Any) -> list[str]:
    """The digests of every artifact reference in a stored state (or state delta): a value's
    ``{"$artifact": {"digest": ...}}`` and a long list's sealed blocks."""
    found: list[str] = []
    if isinstance(value, dict):
        inner = value.get("$artifact")
        if len(value) == 1 and isinstance(inner, dict):
            if isinstance(inner.get("digest"), str):
                found.append(inner["digest"])
            for block in inner.get("blocks") or []:
                if isinstance(block, dict) and isinstance(block.get("digest"), str):
                    found.append(block["digest"])
        for item in value.values():
            found += artifact_digests(item)
    elif isinstance(value, list):
        for item in value:
            found += artifact_digests(item)
    return found


def run(
    *,
    short: bool,
    batch: int,
    seconds: float,
    lease: int,
    keep: Path | None,
    only: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One drill; returns its results (see the module docstring)."""
    sweep()
    tmp = Path(tempfile.mkdtemp(prefix="openrath-drill-net-")) if keep is None else keep
    drill = Drill(tmp, lease_seconds=lease, step_seconds=0.5)
    began = time.time()
    with drill.stack:
        drill.start()
        specs = drill.faults_for(short=short and not only, seconds=seconds)
        unknown = set(only) - {spec.name for spec in specs}
        if unknown:
            raise SystemExit(f"drill-net: no fault named {', '.join(sorted(unknown))}")
        for spec in specs:
            if not only or spec.name in only:
                drill.run_fault(spec, batch)
        history = drill.history()
        report = hist.check(history)
        alive = drill.alive()
        tails = drill.log_tails() if report.violations or not all(alive.values()) else {}
    leftovers = sweep(drill.bed.tag)
    return {
        "short": short,
        "seconds": round(time.time() - began, 1),
        "lease_seconds": lease,
        "database_tcp": {
            key: os.environ.get(key, "default")
            for key in (
                "DATABASE_TCP_USER_TIMEOUT_MS",
                "DATABASE_KEEPALIVES_IDLE",
                "S3_READ_TIMEOUT",
                "S3_MAX_ATTEMPTS",
            )
        }
        | {
            "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS": os.environ.get(
                "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", f"{lease * 1000} (the lease)"
            )
        },
        "counts": report.counts,
        "claims_by_host": dict(Counter(host_of(c.worker) for c in history.claims)),
        "faults": [
            {
                "name": f.name,
                "host": f.host,
                "seconds": round(f.healed - f.started, 1),
                "runs_caught": len(f.runs),
                "recovery_seconds": round(report.recovery.get(f.name, 0.0), 2),
                "host_back_seconds": round(report.host_recovery.get(f.name, 0.0), 2),
                "stale_sessions": drill.stale.get(f.name, 0),
                "batch_done_seconds": round(drill.batch_done.get(f.name, 0.0), 1),
                "longest_stall_seconds": round(longest_stall(history, f), 1),
                "storage_retries": drill.storage_retries.get(f.name, 0),
                "workflow": next((s.workflow for s in specs if s.name == f.name), "net_effects"),
                "resolution_to_resume": {
                    k: round(v, 2) for k, v in hist.summary(report.resume.get(f.name, [])).items()
                },
            }
            for f in history.faults
        ],
        "recovery": {k: round(v, 2) for k, v in report.recovery_summary().items()},
        "host_back": {k: round(v, 2) for k, v in report.host_recovery_summary().items()},
        "resolution_to_resume": {k: round(v, 2) for k, v in report.resume_summary().items()},
        "resolutions": dict(Counter(str(r.status) for r in history.resolutions)),
        "violations": [asdict(v) for v in report.violations],
        "workers_alive": alive,
        "worker_restarts": dict(drill.restarts),
        "leftovers": leftovers,
        "log": drill.log,
        "worker_logs": tails,
    }


def _p50_max(summary: dict[str, float]) -> str:
    return f"{summary['p50']} / {summary['max']}" if summary else "—"


def results_markdown(results: dict[str, Any]) -> str:
    """The RESULTS.md section: the totals, then one row per fault."""
    counts = results["counts"]
    lines = [
        f"Drill: {results['seconds']} s, leases {results['lease_seconds']} s, "
        f"client network settings {results['database_tcp']}.",
        "",
        f"- runs {counts['runs']}: succeeded {counts['succeeded']}, needs_review "
        f"{counts['needs_review']} (each with its non-idempotent effect in review)",
        f"- claims {counts['claims']} (takeovers {counts['takeovers']}) by host "
        f"{results['claims_by_host']}; step commits {counts['commits']}; chunks "
        f"{counts['chunks']}; effect target requests {counts['target_requests']}",
        f"- faults {counts['faults']}; **violations {len(results['violations'])}**; worker exits "
        f"(restarted) {results['worker_restarts'] or 0}",
        f"- runs caught by a fault moving again after the heal: {results['recovery']} s; the "
        f"faulted host working again: {results['host_back']} s",
        f"- interrupts {counts['interrupts']}, resolve requests {counts['resolve_requests']} "
        f"(by HTTP status {results['resolutions']}); resolution to the resumed step's commit "
        f"{results['resolution_to_resume']} s; artifacts read back from S3 "
        f"{counts['artifacts_read']}",
        "",
        "| fault | host | workflow | seconds | runs caught | runs moved again (s after heal) "
        "| host back (s after heal) | longest stall of a caught run (s) "
        "| storage retries | resolution → resume (s) | sessions idle in a transaction > lease |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{f['name']}` | {f['host']} | {f['workflow']} | {f['seconds']} | {f['runs_caught']} | "
        f"{f['recovery_seconds']} | {f['host_back_seconds']} | {f['longest_stall_seconds']} | "
        f"{f['storage_retries']} | {_p50_max(f['resolution_to_resume'])} | "
        f"{f['stale_sessions']} |"
        for f in results["faults"]
    ]
    for violation in results["violations"]:
        lines.append(f"- violation: {violation}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drill-net", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="five faults (the suite's version)")
    parser.add_argument("--batch", type=int, default=24, help="runs submitted per fault")
    parser.add_argument("--fault-seconds", type=float, default=8.0)
    parser.add_argument("--lease-seconds", type=int, default=4)
    parser.add_argument("--faults", default="", help="only these faults (comma-separated names)")
    parser.add_argument(
        "--write-results",
        action="store_true",
        help='rewrite the "Network faults" section of benchmarks/RESULTS.md',
    )
    parser.add_argument("--out", type=Path, help="also write the results there (JSON)")
    parser.add_argument("--keep", type=Path, help="work directory to keep (logs)")
    args = parser.parse_args(argv)
    # SIGTERM (a timeout, a CI cancel) unwinds like Ctrl-C: the bed and every process go.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    reason = missing_tools()
    if reason:
        print(f"drill-net: cannot run here: {reason}", file=sys.stderr)
        return 77
    results = run(
        short=args.short,
        batch=args.batch,
        seconds=args.fault_seconds,
        lease=args.lease_seconds,
        keep=args.keep,
        only=tuple(name for name in args.faults.split(",") if name),
    )
    text = json.dumps(results, indent=2)
    if args.write_results:
        write_section(
            "network-faults",
            "Network faults",
            results_markdown(results),
            "deploy/bin/drill-net --write-results" + (" --short" if args.short else ""),
        )
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0 if not results["violations"] and not results["leftovers"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
