"""Traces read back from a real backend (Arize Phoenix): the demo research team run through the
API, a web process and two worker processes, its interrupt approved over the API from this
process after the first worker stopped; then a retried step in a project opted in to content.

Asserted on what Phoenix stored: one trace from the creating request to the last step across
the worker hand-off; the hierarchy (run, steps, branches as children of the router step, model
and tool calls, the effect, the interrupt and its wait); the GenAI attributes; ``traceparent``
on the model API requests; no prompt or completion text unless the project opted in; no
secret anywhere in any span.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import urllib.request
import uuid
from typing import Any

import pytest

from openrath_project.examples.research_team import QUESTION
from runs_app.models import Interrupt, Run
from tests.drills.conftest import wait_for
from tests.factories.tenancy import ProjectFactory
from tests.observability.phoenix import PhoenixServer
from tests.s3 import free_ports
from tests.sessions_app.providers.fake_openai import FakeOpenAI, Reply, chunk

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def text_reply(text: str, usage: tuple[int, int] = (11, 7)) -> Reply:
    return Reply(
        sse=[
            chunk({"role": "assistant", "content": text}, model="gpt-fake-0613"),
            chunk({}, finish_reason="stop", model="gpt-fake-0613"),
            chunk(None, usage=usage, model="gpt-fake-0613"),
        ]
    )


def tool_reply(topic: str, call_id: str) -> Reply:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "search_corpus", "arguments": json.dumps({"topic": topic})},
    }
    return Reply(
        sse=[
            chunk({"role": "assistant", "tool_calls": [call]}, model="gpt-fake-0613"),
            chunk({}, finish_reason="tool_calls", model="gpt-fake-0613"),
            chunk(None, usage=(13, 5), model="gpt-fake-0613"),
        ]
    )


def attr(span: dict[str, Any], name: str) -> Any:
    """An attribute of a span as Phoenix returns it (flat, or nested by its dots)."""
    attributes = span.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    value: Any = attributes
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _http(method: str, url: str, token: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - 127.0.0.1
        url,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        return json.loads(response.read())


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


def test_one_trace_from_the_request_through_two_workers_read_back_from_phoenix(
    processes, phoenix: PhoenixServer, project, tenant, make_token, tmp_path
):
    opted = ProjectFactory(tenant=tenant, slug="opted")
    key = f"sk-canary-{secrets.token_hex(16)}"
    token = make_token(["*"])
    phoenix_project = f"openrath-{uuid.uuid4().hex[:8]}"
    (tmp_path / "providers.json").write_text("{}")
    with FakeOpenAI() as api:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.otlp_endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={phoenix_project}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OPENRATH_WORKFLOW_MODULES": "tests.observability.workflows",
            "OPENRATH_TRACE_CONTENT_PROJECTS": f"{tenant.slug}/{opted.slug}",
            "OPENAI_API_KEY": key,
            "OPENAI_BASE_URL": api.base_url,
            "OPENAI_DEFAULT_MODEL": "gpt-fake",
            "OPENRATH_PROVIDER_CONFIG": str(tmp_path / "providers.json"),
        }
        # The planner, each specialist (a tool call, then its answer) and the reviewer.
        api.replies.extend(
            [
                text_reply("Plan: market, then technology."),
                tool_reply("market", "call_a"),
                text_reply("The market grows."),
                tool_reply("technology", "call_b"),
                text_reply("The stack is ready."),
                text_reply("Report: launch in Europe."),
            ]
        )
        (port,) = free_ports(1)
        base = f"http://127.0.0.1:{port}"
        processes.start(
            [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
            name="web",
            **env,
        )
        wait_for(lambda: _healthy(base), timeout=120, what="the web process")
        first = processes.db_worker("worker-a", **env)
        created = _http(
            "POST",
            f"{base}/api/v1/runs/",
            token,
            {"workflow": "research_team", "project": project.slug, "user_message": QUESTION},
        )
        run_id = uuid.UUID(created["id"])

        def pending() -> Interrupt | None:
            return Interrupt.objects.filter(run_id=run_id, status="pending").first()

        wait_for(pending, timeout=240, what="the approval interrupt")
        # The hand-off: the first worker stops; another process approves over the API; a
        # second worker, started afterwards, resumes the run from the database.
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0
        listed = _http("GET", f"{base}/api/v1/interrupts/?status=pending", token)
        (item,) = [i for i in listed["results"] if i["run"] == str(run_id)]
        _http(
            "POST",
            f"{base}/api/v1/interrupts/{item['id']}/resolve/",
            token,
            {"decision": "approve", "request_digest": item["request_digest"]},
        )
        processes.db_worker("worker-b", **env)
        wait_for(
            lambda: Run.objects.get(id=run_id).status == "succeeded", timeout=240, what="the run"
        )
        # A retried step in the project that opted in to content.
        api.replies.extend([text_reply("First try."), text_reply("Second try.")])
        retried = _http(
            "POST",
            f"{base}/api/v1/runs/",
            token,
            {"workflow": "traced_retry", "project": opted.slug, "user_message": "Say hi"},
        )
        retried_id = uuid.UUID(retried["id"])
        wait_for(
            lambda: Run.objects.get(id=retried_id).status == "succeeded",
            timeout=240,
            what="the retried run",
        )
        model_requests = list(api.requests)

    run = Run.objects.get(id=run_id)
    trace_id = run.trace_context["traceparent"].split("-")[1]

    def collected() -> list[dict[str, Any]] | None:
        spans = phoenix.spans(phoenix_project)
        names = {s["name"] for s in spans}
        wanted = {"openrath.step publish", "openrath.interrupt.wait approval", "openrath.step ask"}
        asks = [s for s in spans if s["name"] == "openrath.step ask"]
        return spans if wanted <= names and len(asks) == 2 else None

    spans = wait_for(collected, timeout=120, what="the spans in Phoenix", every=0.5)
    assert isinstance(spans, list)
    (tmp_path / "spans.json").write_text(json.dumps(spans, indent=1))  # kept by pytest
    print(f"spans: {tmp_path / 'spans.json'}")
    by_id = {s["context"]["span_id"]: s for s in spans}
    in_trace = [s for s in spans if s["context"]["trace_id"] == trace_id]

    def named(name: str, within: list[dict[str, Any]] = in_trace) -> list[dict[str, Any]]:
        return [s for s in within if s["name"] == name]

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        return by_id[span["parent_id"]]

    # The root: the request that created the run (Django's span), then the run's own span.
    (root,) = named("openrath.run")
    assert attr(root, "openrath.run.id") == str(run_id)
    assert attr(root, "openrath.run.workflow") == "research_team"
    request_span = parent(root)
    assert request_span["parent_id"] is None
    assert request_span["span_kind"] == "SERVER" or "POST" in request_span["name"]
    # Every step attempt is a child of the run's span, whichever worker ran it.
    main_steps = ["plan", "split", "merge", "draft", "approve", "publish"]
    steps = {name: named(f"openrath.step {name}") for name in main_steps}
    assert {name: len(found) for name, found in steps.items()} == {
        "plan": 1,
        "split": 1,
        "merge": 1,
        "draft": 1,
        "approve": 2,  # asked, then resumed after the approval
        "publish": 1,
    }
    for found in steps.values():
        for step in found:
            assert step["parent_id"] == root["context"]["span_id"]
    workers = {attr(s, "openrath.worker").rsplit("-", 1)[0] for s in steps["approve"]}
    assert workers == {"worker-a", "worker-b"}
    first_approve, second_approve = sorted(steps["approve"], key=lambda s: s["start_time"])
    assert attr(first_approve, "openrath.step.outcome") == "waiting"
    assert attr(steps["publish"][0], "openrath.step.outcome") == "succeeded"
    assert attr(steps["publish"][0], "openrath.worker").startswith("worker-b")
    # Branches: children of the router step, running under it.
    router = steps["split"][0]
    branches = named("openrath.step market") + named("openrath.step technology")
    assert len(branches) == 2
    assert {b["parent_id"] for b in branches} == {router["context"]["span_id"]}
    assert {attr(b, "openrath.run.branch") for b in branches} == {"market", "technology"}
    # Model calls (GenAI conventions) under their steps; tool calls beside them.
    chats = [s for s in in_trace if attr(s, "gen_ai.operation.name") == "chat"]
    assert len(chats) == 6
    for chat in chats:
        assert chat["name"] == "chat gpt-fake"
        assert chat["span_kind"] == "LLM"  # Phoenix shows the OpenInference kind
        assert attr(chat, "gen_ai.provider.name") == "openai"
        assert attr(chat, "gen_ai.request.model") == "gpt-fake"
        assert attr(chat, "gen_ai.response.model") == "gpt-fake-0613"
        assert parent(chat)["name"].startswith("openrath.step ")
        assert attr(chat, "openrath.gen_ai.time_to_first_token_seconds") is not None or (
            attr(chat, "gen_ai.response.finish_reasons") == ["tool_calls"]
        )
        assert attr(chat, "gen_ai.input.messages") is None  # research did not opt in
        assert attr(chat, "gen_ai.output.messages") is None
    plan_chat = next(c for c in chats if parent(c)["name"] == "openrath.step plan")
    assert attr(plan_chat, "gen_ai.usage.input_tokens") == 11
    assert attr(plan_chat, "gen_ai.usage.output_tokens") == 7
    assert attr(plan_chat, "gen_ai.response.finish_reasons") == ["stop"]
    assert attr(plan_chat, "gen_ai.agent.name") == "planner"
    tools = [s for s in in_trace if attr(s, "gen_ai.operation.name") == "execute_tool"]
    assert sorted(attr(t, "gen_ai.tool.call.id") for t in tools) == ["call_a", "call_b"]
    for tool in tools:
        assert tool["name"] == "execute_tool search_corpus"
        assert attr(tool, "gen_ai.tool.name") == "search_corpus"
        assert parent(tool) in branches
    # Outgoing HTTP to the model API: an httpx2 client span under the model call, and the
    # request carried its context.
    for request in model_requests[:6]:
        header = request.headers["traceparent"]
        assert header.split("-")[1] == trace_id
        client = by_id[header.split("-")[2]]
        assert (client["name"], attr(client, "http.method")) == ("POST", "POST")
        assert attr(client, "http.url") == f"{api.base_url}/chat/completions"
        assert parent(client) in chats
    # The effect, the interrupt and the wait for the decision.
    (effect,) = named("openrath.effect publish-report")
    assert parent(effect) == steps["publish"][0]
    assert attr(effect, "openrath.effect.key") == "publish-report"
    assert attr(effect, "openrath.effect.class") == "non_idempotent"
    assert attr(effect, "openrath.effect.outcome") == "applied"
    assert attr(effect, "openrath.effect.ledger_status") == "succeeded"
    asked = named("openrath.interrupt approval")
    assert sorted(attr(i, "openrath.interrupt.outcome") for i in asked) == ["decided", "waiting"]
    assert {parent(i)["name"] for i in asked} == {"openrath.step approve"}
    (waited,) = named("openrath.interrupt.wait approval")
    assert waited["parent_id"] == root["context"]["span_id"]
    assert attr(waited, "openrath.interrupt.decision") == "approve"
    assert attr(waited, "openrath.interrupt.wait_seconds") >= 0
    assert waited["start_time"] <= second_approve["start_time"]
    # The retried run: two attempts as siblings under its run span, content recorded (opted in).
    retried_run = Run.objects.get(id=retried_id)
    retried_trace = retried_run.trace_context["traceparent"].split("-")[1]
    asks = [s for s in spans if s["name"] == "openrath.step ask"]
    assert {s["context"]["trace_id"] for s in asks} == {retried_trace}
    assert len({s["parent_id"] for s in asks}) == 1
    assert sorted(attr(s, "openrath.step.attempt") for s in asks) == [1, 2]
    failed = next(s for s in asks if attr(s, "openrath.step.attempt") == 1)
    assert failed["status_code"] == "ERROR"
    assert attr(failed, "error.type") == "RuntimeError"
    assert [e["name"] for e in failed["events"]].count("retry.scheduled") == 1
    opted_chats = [
        s
        for s in spans
        if s["context"]["trace_id"] == retried_trace and attr(s, "gen_ai.operation.name") == "chat"
    ]
    assert len(opted_chats) == 2
    assert all("Say hi" in attr(c, "gen_ai.input.messages") for c in opted_chats)
    assert {json.loads(attr(c, "gen_ai.output.messages"))[0]["content"] for c in opted_chats} == {
        "First try.",
        "Second try.",
    }
    # The secret canary: the key reached the model API, and no span holds it or the token.
    assert model_requests[0].headers["authorization"] == f"Bearer {key}"
    exported = json.dumps(spans)
    for canary in (key, token, token.split("_", 2)[2]):
        assert canary not in exported


def test_the_request_the_celery_task_and_the_steps_are_one_trace(
    processes, phoenix: PhoenixServer, project, make_token
):
    from tests.support import require_redis

    redis_url = require_redis()
    token = make_token(["*"])
    phoenix_project = f"openrath-celery-{uuid.uuid4().hex[:8]}"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.otlp_endpoint,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={phoenix_project}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OPENRATH_WORKFLOW_MODULES": "tests.observability.workflows",
        "OPENRATH_DISPATCH": "celery",
        "REDIS_URL": redis_url,
    }
    (port,) = free_ports(1)
    base = f"http://127.0.0.1:{port}"
    processes.start(
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        name="web",
        **env,
    )
    wait_for(lambda: _healthy(base), timeout=120, what="the web process")
    processes.start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "openrath_project",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "--loglevel",
            "INFO",
            "-n",
            "traced@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        name="celery",
        **env,
    )
    created = _http(
        "POST", f"{base}/api/v1/runs/", token, {"workflow": "traced_steps", "project": project.slug}
    )
    run_id = uuid.UUID(created["id"])
    wait_for(lambda: Run.objects.get(id=run_id).status == "succeeded", timeout=240, what="the run")
    trace_id = Run.objects.get(id=run_id).trace_context["traceparent"].split("-")[1]

    def collected() -> list[dict[str, Any]] | None:
        spans = [s for s in phoenix.spans(phoenix_project) if s["context"]["trace_id"] == trace_id]
        names = {s["name"] for s in spans}
        wanted = {"openrath.step second", "run/runs_app.tasks.execute_run"}
        return spans if wanted <= names else None

    spans = wait_for(collected, timeout=120, what="the spans in Phoenix", every=0.5)
    assert isinstance(spans, list)
    by_id = {s["context"]["span_id"]: s for s in spans}
    (request,) = [s for s in spans if s["parent_id"] is None]
    assert request["name"] == "POST api/v1/runs/$"
    # Celery's instrumentation carried the request's context in the task message.
    (published,) = [s for s in spans if s["name"] == "apply_async/runs_app.tasks.execute_run"]
    (executed,) = [s for s in spans if s["name"] == "run/runs_app.tasks.execute_run"]
    assert by_id[executed["parent_id"]] == published
    assert published["parent_id"] == request["context"]["span_id"]
    # The run's steps continue the run's stored context, in the same trace.
    (root,) = [s for s in spans if s["name"] == "openrath.run"]
    assert root["parent_id"] == request["context"]["span_id"]
    steps = [s for s in spans if s["name"].startswith("openrath.step ")]
    assert sorted(s["name"] for s in steps) == ["openrath.step first", "openrath.step second"]
    assert {s["parent_id"] for s in steps} == {root["context"]["span_id"]}
    assert all(attr(s, "openrath.worker").startswith("celery:") for s in steps)


def test_a_library_script_on_sqlite_sets_tracing_up_itself(phoenix: PhoenixServer, tmp_path):
    """The demo run in a script (embedded profile, SQLite, scripted models, approved in the
    same process): the script's first run sets the SDK up; its exit flushes the spans."""
    import os
    import subprocess

    from tests.support import REPO

    phoenix_project = f"openrath-script-{uuid.uuid4().hex[:8]}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENRATH_", "OTEL_", "OPENAI_")) and k != "DATABASE_URL"
    }
    env.update(
        {
            "OPENRATH_DATA_DIR": str(tmp_path / "data"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.otlp_endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={phoenix_project}",
            "PYTHONPATH": str(REPO),
        }
    )
    script = subprocess.run(
        [sys.executable, "-m", "openrath_project.examples.research_team"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert script.returncode == 0, script.stderr[-3000:]

    def collected() -> list[dict[str, Any]] | None:
        spans = phoenix.spans(phoenix_project)
        return spans if any(s["name"] == "openrath.step publish" for s in spans) else None

    spans = wait_for(collected, timeout=120, what="the script's spans in Phoenix", every=0.5)
    assert isinstance(spans, list)
    (root,) = [s for s in spans if s["name"] == "openrath.run"]
    assert root["parent_id"] is None  # no request: the run is the root
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}
    by_id = {s["context"]["span_id"]: s for s in spans}
    names = sorted(s["name"] for s in spans if s["parent_id"] == root["context"]["span_id"])
    assert names == [
        "openrath.interrupt.wait approval",
        "openrath.step approve",
        "openrath.step approve",
        "openrath.step draft",
        "openrath.step merge",
        "openrath.step plan",
        "openrath.step publish",
        "openrath.step split",
    ]
    chats = [s for s in spans if attr(s, "gen_ai.operation.name") == "chat"]
    assert {attr(c, "gen_ai.provider.name") for c in chats} == {"scripted"}
    assert {attr(c, "gen_ai.agent.name") for c in chats} == {
        "planner",
        "market-analyst",
        "technology-analyst",
        "reviewer",
    }
    branch_names = ("openrath.step market", "openrath.step technology")
    branch_steps = [s for s in spans if s["name"] in branch_names]
    assert len(branch_steps) == 2
    assert {by_id[s["parent_id"]]["name"] for s in branch_steps} == {"openrath.step split"}
    (effect,) = [s for s in spans if s["name"] == "openrath.effect publish-report"]
    assert attr(effect, "openrath.effect.outcome") == "applied"
