"""API fuzzing with schemathesis, from the committed OpenAPI document, against a running server.

    python benchmarks/fuzz.py                      # embedded profile, 40 examples per operation
    python benchmarks/fuzz.py --examples 200       # longer
    python benchmarks/fuzz.py --profile production # the production profile (production-local)
    python benchmarks/fuzz.py --base-url http://127.0.0.1:8000 --token ort_... # a running server

Starts the embedded server (SQLite in a temporary data dir), or with ``--profile production``
the whole production profile with ``deploy/bin/production-local`` (PostgreSQL with separate
roles, Redis, SeaweedFS, uvicorn, Celery), unless ``--base-url`` is given,
mints tokens of several grant sets (everything; read only; nothing useful), sends the hostile
inputs the schema cannot generate (:data:`HOSTILE`: deep JSON, lone surrogates, 1e999, 2^63
and 10,000-digit integers, forged artifact references), and for every operation generates
requests from the schema (valid and invalid). Checks for each response: no
5xx, the status code is documented, the body matches the documented schema (the error body
included), and a rejected write changed nothing (row counts of the main tables are the same).
Only 127.0.0.1 is ever targeted; the run is bounded by ``--examples`` and ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import REPO, manage, write_section  # noqa: E402

DOCUMENT = REPO / "deploy" / "openapi-v1.json"
GRANT_SETS = {
    "all": "*",
    "read-only": "projects:read,sessions:read,runs:read,interrupts:read,effects:read,"
    "memory:read,audit:read",
    "unrelated": "tokens:manage",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    data_dir: str,
) -> tuple[subprocess.Popen[bytes], str, dict[str, str], dict[str, str]]:
    port = free_port()
    env = {
        **os.environ,
        "OPENRATH_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_RATE_LIMIT_BURST": "0",
        "LOG_LEVEL": "WARNING",
        # The conformance world's webhook target (nothing listens there: each attempt fails).
        "WEBHOOK_ALLOWED_CIDRS": WEBHOOK_CIDR,
    }
    env.pop("DATABASE_URL", None)
    manage(env, "migrate", "-v0")
    manage(env, "create_tenant", "fuzz")
    manage(env, "create_project", "fuzz", "fuzz")
    manage(env, "create_tenant", "other")
    manage(env, "create_project", "other", "fuzz")
    tokens = {
        name: manage(env, "create_token", "fuzz", "--grants", grants, "--name", name)
        for name, grants in GRANT_SETS.items()
    }
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=REPO,
        env={**env, "OPENRATH_EMBEDDED_WORKERS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2):  # noqa: S310 - localhost
                break
        except OSError:
            time.sleep(0.3)
    return server, base, tokens, env


TABLES = (
    "tenancy_project",
    "sessions_app_session",
    "sessions_app_chunk",
    "sessions_app_lineageedge",
    "runs_app_run",
    "runs_app_interrupt",
    "effects_app_effectrecord",
    "memory_app_memoryentry",
    "tenancy_apitoken",
)


def counts(env: dict[str, str]) -> tuple[int, ...]:
    """Row counts of the tables a write could touch (the embedded SQLite file, or the
    production profile's PostgreSQL database)."""
    if env.get("DATABASE_URL", "").startswith("postgres"):
        import psycopg

        with psycopg.connect(env["DATABASE_URL"], autocommit=True) as pg:
            return tuple(
                pg.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]  # noqa: S608
                for t in TABLES
            )
    import sqlite3

    with sqlite3.connect(Path(env["OPENRATH_DATA_DIR"]) / "db.sqlite3", timeout=30) as db:
        return tuple(
            db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
            for t in TABLES
        )


def start_production(run_dir: Path) -> tuple[str, dict[str, str], dict[str, str], dict[str, str]]:
    """The production profile via production-local: (base url, tokens, its env, script env)."""
    from benchmarks import load

    local = load.local_env(run_dir, 1)
    local["OPENRATH_RATE_LIMIT_BURST"] = "0"
    subprocess.run(
        [str(load.SCRIPT), "start"],
        cwd=REPO,
        env=local,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    env = load.production_env(run_dir)
    for args in (
        ("create_tenant", "fuzz"),
        ("create_project", "fuzz", "fuzz"),
        ("create_tenant", "other"),
        ("create_project", "other", "fuzz"),
    ):
        manage(env, *args)
    tokens = {
        name: manage(env, "create_token", "fuzz", "--grants", grants, "--name", name)
        for name, grants in GRANT_SETS.items()
    }
    return f"http://127.0.0.1:{local['OPENRATH_LOCAL_WEB_PORT']}", tokens, env, local


def stop_production(local: dict[str, str]) -> None:
    from benchmarks import load

    subprocess.run(
        [str(load.SCRIPT), "stop"], cwd=REPO, env=local, timeout=120, stdout=subprocess.DEVNULL
    )
    load.drop_database(local["OPENRATH_LOCAL_DB"])


# --- Hostile inputs the schema does not generate (issue 14, item 8) ----------------------------

_DEEP = "[" * 1000 + "]" * 1000
_DEEPER = "[" * 100_000 + "]" * 100_000
_HUGE_INT = "1" + "0" * 10_000
_FORGED = (
    '{"$artifact": {"digest": "' + "ab" * 32 + '", "size": 3, "media_type": "application/json"}}'
)


def _chunk(content: str, usage: str = "", kind: str = "message", role: str = "user") -> str:
    extra = f', "usage": {usage}' if usage else ""
    return f'{{"chunks": [{{"role": "{role}", "kind": "{kind}", "content": {content}{extra}}}]}}'


def _import(line: str) -> str:
    header = '{"type": "header", "format": "openrath-django/sessions", "version": 1}'
    text = json.dumps(header + "\n" + line + "\n")
    return f'{{"project": "fuzz", "files": [{{"name": "x.jsonl", "content": {text}}}]}}'


#: (name, method, path, raw JSON body): each must be a 400 with the error body and change
#: nothing. ``{session}`` is a session of project ``fuzz``. Raw text, because most of these
#: cannot be written by a JSON encoder (a lone surrogate, 1e999) or are too deep for one.
HOSTILE: list[tuple[str, str, str, str | None]] = [
    ("body nested 1000 deep", "POST", "sessions/", f'{{"project": "fuzz", "metadata": {_DEEP}}}'),
    (
        "body nested 100000 deep",
        "POST",
        "sessions/",
        f'{{"project": "fuzz", "metadata": {_DEEPER}}}',
    ),
    (
        "memory metadata 500 deep",
        "POST",
        "memory/",
        '{"project": "fuzz", "text": "a fact", "metadata": {"m": ' + "[" * 500 + "]" * 500 + "}}",
    ),
    (
        "lone surrogate in content",
        "POST",
        "sessions/{session}/chunks/",
        _chunk('{"text": "\\udfff"}'),
    ),
    (
        "lone surrogate in a key",
        "POST",
        "sessions/{session}/chunks/",
        _chunk('{"text": "", "\\udfff": 1}'),
    ),
    ("1e999 in content", "POST", "sessions/{session}/chunks/", _chunk('{"text": "", "n": 1e999}')),
    (
        "2^63 prompt tokens",
        "POST",
        "sessions/{session}/chunks/",
        _chunk('{"text": ""}', '{"prompt_tokens": 9223372036854775808}'),
    ),
    (
        "cost_usd 1e12",
        "POST",
        "sessions/{session}/chunks/",
        _chunk('{"text": ""}', '{"cost_usd": 1000000000000.0}'),
    ),
    (
        "forged artifact chunk",
        "POST",
        "sessions/{session}/chunks/",
        _chunk('{"digest": "' + "ab" * 32 + '"}', kind="artifact", role="tool"),
    ),
    (
        "token_budget 2^70",
        "POST",
        "runs/",
        '{"workflow": "w", "project": "fuzz", "token_budget": 1180591620717411303424}',
    ),
    (
        "forged artifact state",
        "POST",
        "runs/",
        f'{{"workflow": "w", "project": "fuzz", "state": {{"x": {_FORGED}}}}}',
    ),
    ("fork at 2^70", "POST", "sessions/{session}/fork/", '{"at": 1180591620717411303424}'),
    (
        "import nested 1000 deep",
        "POST",
        "sessions/import/",
        _import(f'{{"type": "session", "m": {_DEEP}}}'),
    ),
    (
        "import 10000-digit integer",
        "POST",
        "sessions/import/",
        _import(f'{{"type": "session", "n": {_HUGE_INT}}}'),
    ),
    ("chunks after 2^63-1", "GET", "sessions/{session}/chunks/?after=9223372036854775807", None),
    ("chunks after 2^64", "GET", "sessions/{session}/chunks/?after=18446744073709551616", None),
]


def probe_hostile(base: str, token: str, env: dict[str, str] | None) -> list[dict[str, Any]]:
    """Send every :data:`HOSTILE` request with an all-grants token; the failures found (each
    must be a 400 with the documented error body, and change no stored row), then check that
    the session, the session list and the project page still answer."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(method: str, path: str, body: str | None) -> tuple[int, str]:
        request = urllib.request.Request(  # noqa: S310 - localhost only
            f"{base}/api/v1/{path}",
            data=body.encode() if body is not None else None,
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    status, text = call("POST", "sessions/", '{"project": "fuzz", "user_message": "hostile"}')
    if status != 201:
        return [{"operation": "set-up", "status": status, "problem": "no session", "body": text}]
    session = json.loads(text)["id"]
    failures: list[dict[str, Any]] = []
    for name, method, path, body in HOSTILE:
        before = counts(env) if env is not None else None
        status, text = call(method, path.format(session=session), body)
        problem = None
        try:
            error = json.loads(text)["error"]
            shaped = set(error) == {"code", "message", "details"}
        except (ValueError, KeyError, TypeError):
            shaped = False
        if status != 400 or not shaped:
            problem = f"expected a 400 with the error body, got {status}"
        elif before is not None and counts(env or {}) != before:
            problem = "a rejected request changed stored rows"
        if problem:
            failures.append(
                {
                    "token": "all",
                    "operation": name,
                    "status": status,
                    "problem": problem,
                    "body": text[:300],
                }
            )
    for path in (f"sessions/{session}/", "sessions/", "projects/fuzz/"):
        status, text = call("GET", path, None)
        if status != 200:
            failures.append(
                {
                    "token": "all",
                    "operation": f"GET {path} afterwards",
                    "status": status,
                    "problem": "not readable",
                    "body": text[:300],
                }
            )
    return failures


def _api(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - localhost only
        f"{base}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - localhost only
        text = response.read().decode()
        is_json = response.headers.get_content_type() == "application/json"
    return json.loads(text) if is_json else text


#: The one private address the fuzzed server may send webhooks to (a closed port on loopback).
WEBHOOK_CIDR = "127.0.0.9/32"
WEBHOOK_URL = "http://127.0.0.9:9/hook"
WEBHOOK_EVENTS = ("run.succeeded", "run.failed", "run.waiting", "interrupt.created")
ZERO_ID = "00000000-0000-0000-0000-000000000000"


def _optional(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """An object of the world that the walk can do without (``None`` when refused)."""
    try:
        return _api(base, token, method, path, body)
    except urllib.error.HTTPError:
        return None


def conformance_world(base: str, token: str) -> dict[str, Any]:
    """A project, a session with chunks (and its fork), a run and a memory entry, made through
    the API: the ids :func:`conformance_walk` fills path parameters and bodies with."""
    session = _api(
        base,
        token,
        "POST",
        "/api/v1/sessions/",
        {"project": "fuzz", "title": "conformance", "user_message": "hello"},
    )
    _api(
        base,
        token,
        "POST",
        f"/api/v1/sessions/{session['id']}/chunks/",
        {"chunks": [{"role": "assistant", "kind": "message", "content": {"text": "hi"}}]},
    )
    other = _api(base, token, "POST", "/api/v1/sessions/", {"project": "fuzz", "title": "b"})
    # Before the run, so its events enqueue deliveries (each attempt fails: nothing listens).
    webhook = _optional(
        base,
        token,
        "POST",
        "/api/v1/webhooks/",
        {"project": "fuzz", "url": WEBHOOK_URL, "event_types": list(WEBHOOK_EVENTS)},
    )
    workflows = _api(base, token, "GET", "/api/v1/workflows/")["results"]
    names = [w["name"] for w in workflows]
    run = None
    for name in names:
        try:
            run = _api(
                base,
                token,
                "POST",
                "/api/v1/runs/",
                {"project": "fuzz", "workflow": name, "user_message": "conformance"},
            )
            break
        except urllib.error.HTTPError:
            continue
    export = _api(base, token, "GET", f"/api/v1/sessions/{session['id']}/export/")
    workflow = run["workflow"] if run else "none"
    schedule = _optional(
        base,
        token,
        "POST",
        "/api/v1/schedules/",
        {
            "project": "fuzz",
            "workflow": workflow,
            "kind": "interval",
            "interval_seconds": 3600,
            "paused": True,
            "user_message": "conformance",
        },
    )
    delivery = None
    deadline = time.monotonic() + 60  # the embedded worker runs the run; a generous bound
    while webhook is not None and run is not None and time.monotonic() < deadline:
        page = _api(base, token, "GET", f"/api/v1/webhooks/{webhook['id']}/deliveries/")
        if page["results"]:
            delivery = page["results"][0]["id"]
            break
        time.sleep(0.5)
    return {
        "session": session["id"],
        "other": other["id"],
        "run": run["id"] if run else None,
        "workflow": workflow,
        "export": export,
        "schedule": schedule["id"] if schedule else None,
        "webhook": webhook["id"] if webhook else None,
        "delivery": delivery,
    }


def _conformance_request(path: str, method: str, world: dict[str, Any]) -> dict[str, Any]:
    """A valid request for one operation: path parameters, query and body."""
    ids = {
        "/api/v1/sessions/": world["session"],
        "/api/v1/runs/": world["run"],
        "/api/v1/projects/": "fuzz",
        "/api/v1/workflows/": world["workflow"],
        "/api/v1/schedules/": world.get("schedule"),
        "/api/v1/webhooks/": world.get("webhook"),
    }
    params: dict[str, Any] = {}
    for prefix, value in ids.items():
        if path.startswith(prefix) and "{" in path:
            params["id" if "{id}" in path else "name"] = value or ZERO_ID
    # Every other path parameter, with a real object of its kind where the world has one: the
    # run compared with itself (its own lineage), the subscription's delivery.
    others = {"other": world["run"], "delivery_id": world.get("delivery"), "digest": "0" * 64}
    for name in re.findall(r"\{([A-Za-z_]+)\}", path):
        if name not in params:
            params[name] = others.get(name) or ZERO_ID
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/api/v1/sessions/"): {"project": "fuzz", "user_message": "conformance"},
        ("POST", "/api/v1/sessions/{id}/chunks/"): {
            "chunks": [{"role": "user", "kind": "message", "content": {"text": "more"}}]
        },
        ("POST", "/api/v1/sessions/{id}/fork/"): {},
        ("POST", "/api/v1/sessions/{id}/detach/"): {},
        ("POST", "/api/v1/sessions/merge/"): {"sessions": [world["session"], world["other"]]},
        ("POST", "/api/v1/sessions/import/"): {
            "project": "fuzz",
            "files": [{"name": "graph.jsonl", "content": world["export"]}],
        },
        ("POST", "/api/v1/runs/"): {
            "project": "fuzz",
            "workflow": world["workflow"],
            "user_message": "conformance",
        },
        ("POST", "/api/v1/schedules/"): {
            "project": "fuzz",
            "workflow": world["workflow"],
            "kind": "interval",
            "interval_seconds": 3600,
            "paused": True,
            "user_message": "conformance",
        },
        ("POST", "/api/v1/webhooks/"): {
            "project": "fuzz",
            "url": WEBHOOK_URL,
            "event_types": ["run.failed"],
        },
        ("POST", "/api/v1/runs/{id}/cancel/"): {},
        ("POST", "/api/v1/runs/{id}/resume/"): {},
        ("POST", "/api/v1/projects/"): {"slug": f"c{int(time.time() * 1000) % 10**9}"},
        ("POST", "/api/v1/memory/"): {"project": "fuzz", "text": "the sky is blue"},
        ("POST", "/api/v1/memory/recall/"): {"project": "fuzz", "query": "sky"},
        ("POST", "/api/v1/interrupts/{id}/resolve/"): {
            "decision": "approve",
            "request_digest": "0" * 64,
        },
        ("POST", "/api/v1/effects/{id}/resolve/"): {
            "outcome": "applied",
            "request_digest": "0" * 64,
        },
    }
    request: dict[str, Any] = {"path_parameters": params}
    if path.endswith("/stream/"):  # an event stream: what is committed, then the end
        request["query"] = {"follow": "false"}
    if method in ("POST", "PATCH"):
        request["body"] = bodies.get((method, path), {})
        request["media_type"] = "application/json"
    return request


def conformance_walk(base: str, token: str) -> dict[str, Any]:
    """Every operation of the document, called once with a valid request: each response must
    conform to the document (status code documented, content type, body schema:
    schemathesis' ``response_schema_conformance``), so a handler whose answer differs from the
    document (issue 18: the chunks append's bare array documented as a page) fails here even
    where random inputs rarely reach the success path. Returns the operations whose answer was
    a 2xx and the failures."""
    import schemathesis
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    world = conformance_world(base, token)
    schema = schemathesis.openapi.from_path(str(DOCUMENT))
    succeeded: list[str] = []
    failures: list[dict[str, Any]] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    # Deletes last: the operations after them still find the world's schedule and webhook.
    for operation in sorted(operations, key=lambda op: op.method.upper() == "DELETE"):
        request = _conformance_request(operation.path, operation.method.upper(), world)
        case = operation.Case(**request)
        response = case.call(base_url=base, headers={"Authorization": f"Bearer {token}"})
        try:
            case.validate_response(
                response,
                checks=[
                    status_code_conformance,
                    content_type_conformance,
                    response_schema_conformance,
                ],
            )
        except (Exception, BaseExceptionGroup) as exc:  # check failures come as exceptions
            failures.append(
                {
                    "operation": operation.label,
                    "status": response.status_code,
                    "problem": str(exc)[:800],
                    "body": response.text[:300],
                }
            )
        if 200 <= response.status_code < 300:
            succeeded.append(operation.label)
    return {"succeeded": succeeded, "failures": failures}


def fuzz(
    base: str, tokens: dict[str, str], examples: int, max_seconds: float, env: dict[str, str] | None
) -> dict[str, Any]:
    import hypothesis
    import schemathesis
    from hypothesis import HealthCheck, Phase, settings
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    schema = schemathesis.openapi.from_path(str(DOCUMENT))
    tried = 0
    failures: list[dict[str, Any]] = []
    statuses: dict[int, int] = {}
    started = time.monotonic()

    def make_test(operation: Any, name: str, token: str) -> Any:
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        @hypothesis.given(case=operation.as_strategy())
        def run(case: Any) -> None:
            nonlocal tried
            if time.monotonic() - started > max_seconds:
                return
            tried += 1
            before = counts(env) if env and case.method.upper() != "GET" else None
            response = case.call(
                base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            problem = None
            try:
                # Not checked: that every schema-valid request is accepted. Cross-field rules
                # (session or user_message, a registered workflow name, an opaque cursor) make
                # some of them a documented 400, which is the point of those rules.
                case.validate_response(response, excluded_checks=[positive_data_acceptance])
            except (Exception, BaseExceptionGroup) as exc:  # check failures come as exceptions
                problem = str(exc)[:800]
            if response.status_code >= 500:
                problem = problem or f"server error {response.status_code}"
            if (
                problem is None
                and before is not None
                and env is not None
                and response.status_code >= 400
                and counts(env) != before
            ):
                problem = f"a rejected {case.method} changed stored rows"
            if problem:
                failures.append(
                    {
                        "token": name,
                        "operation": operation.label,
                        "status": response.status_code,
                        "problem": problem,
                        "body": response.text[:300],
                    }
                )

        return run

    if "all" in tokens:
        hostile = probe_hostile(base, tokens["all"], env)
        failures.extend(hostile)
        tried += len(HOSTILE)
        walk = conformance_walk(base, tokens["all"])
        failures.extend(walk["failures"])
        tried += len(walk["succeeded"])
    for name, token in tokens.items():
        for result in schema.get_all_operations():
            operation = result.ok()
            try:
                make_test(operation, name, token)()
            except (Exception, BaseExceptionGroup) as exc:  # keep the other operations going
                failures.append(
                    {
                        "token": name,
                        "operation": operation.label,
                        "problem": f"{type(exc).__name__}: {str(exc)[:300]}",
                    }
                )
    return {
        "tried": tried,
        "failures": failures,
        "statuses": statuses,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--max-seconds", type=float, default=900)
    parser.add_argument("--profile", choices=("embedded", "production"), default="embedded")
    parser.add_argument("--base-url")
    parser.add_argument("--token", action="append", default=[])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--failures-file", help="write every failure found here (JSON)")
    args = parser.parse_args()
    server = None
    env = None
    local = None
    if args.base_url:
        base, tokens = args.base_url, {f"t{i}": t for i, t in enumerate(args.token)}
        if not base.startswith(("http://127.0.0.1", "http://localhost")):
            raise SystemExit("fuzzing only ever targets 127.0.0.1 / localhost")
    elif args.profile == "production":
        base, tokens, env, local = start_production(
            Path(tempfile.mkdtemp(prefix="openrath-fuzz-prod-"))
        )
    else:
        server, base, tokens, env = start_server(tempfile.mkdtemp(prefix="openrath-fuzz-"))
    try:
        result = fuzz(base, tokens, args.examples, args.max_seconds, env)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if local is not None:
            stop_production(local)
    print(json.dumps({k: v for k, v in result.items() if k != "failures"}, indent=2))
    if args.failures_file:
        Path(args.failures_file).write_text(json.dumps(result["failures"], indent=1))
    for failure in result["failures"][:50]:
        headline = (
            failure["problem"].split("\n\n")[1:3]
            if "\n\n" in failure["problem"]
            else [failure["problem"]]
        )
        print(
            failure["token"],
            failure["operation"],
            failure.get("status"),
            " | ".join(line.strip()[:200] for line in headline),
            "|",
            failure.get("body", "")[:200],
        )
    body = (
        f"Requests tried: **{result['tried']}** ({args.examples} examples per operation and "
        f"token, {len(tokens)} tokens: {', '.join(tokens)}) in {result['seconds']} s; "
        f"failures found: **{len(result['failures'])}**.\n\n"
        f"Status codes: {json.dumps(dict(sorted(result['statuses'].items())))}.\n"
    )
    if not args.no_write and not args.base_url:
        suffix = "" if args.profile == "embedded" else f"-{args.profile}"
        write_section(
            f"fuzz{suffix}",
            f"API fuzzing (schemathesis, {args.profile} profile)",
            body,
            f"python benchmarks/fuzz.py --profile {args.profile} --examples {args.examples}",
        )
    if result["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
