"""Every example of the ladder runs offline (scripted provider) and does what it says."""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def run(name: str, **kwargs):
    return importlib.import_module(f"openrath_project.examples.{name}").main(**kwargs)


def test_hello_agent():
    result = run("hello_agent")
    assert result["answer"] == "Hello, Ada! Welcome aboard."
    assert result["length"] == 2


def test_session_lineage():
    result = run("session_lineage")
    assert result["merged"] == [
        "Which database?",
        "Postgres: concurrency, SQL, extensions.",
        "SQLite: one file, zero operations.",
    ]
    assert len(result["branches"]) == 2
    assert result["ops"] == ["detach", "fork", "fork", "merge", "merge"]
    assert result["nodes"] == 5
    assert result["detached_parents"] == 1  # a detached session is its own root


def test_tools_and_sandbox(tmp_path):
    result = run("tools_and_sandbox", workspace=str(tmp_path))
    write, read, escape = result["results"]
    assert write["output"] == {"path": "notes.md", "bytes_written": 18}
    assert read["output"]["content"] == "# Notes\n- ship it\n"
    assert "outside the workspace" in escape["error"]
    assert (tmp_path / "notes.md").read_text() == "# Notes\n- ship it\n"


def test_custom_tool():
    result = run("custom_tool")
    parameters = result["schema"]["function"]["parameters"]
    assert parameters["required"] == ["amount"]
    first, second, third = result["results"]
    assert "amount" in first["error"]  # the bad call came back as an error to correct
    assert second["output"] == {"amount": 9.0, "currency": "EUR"}
    assert third["output"] == {"time": "09:30"}


def test_mcp_tool():
    result = run("mcp_tool")
    assert result["tools"] == ["lookup"]
    assert result["output"] == {
        "result": "a worker's time-limited hold on a run, fenced by a token"
    }


def test_streaming():
    result = run("streaming")
    assert result["deltas"] == ["Chunks ", "arrive ", "in order, ", "exactly once."]
    assert result["commits"] == [(0, 0), (1, 1)]
    assert result["answer"] == "Chunks arrive in order, exactly once."


def test_compression():
    result = run("compression")
    assert result["op"] == "compress"
    assert result["texts"] == ["You are concise.", "Launch: 8 details, all on track."]
    assert result["replaces"]["length"] == 10
    assert [op for _, _, op in result["edges"]] == ["compress"]


def test_memory():
    result = run("memory")
    assert result["top"] == "The launch is on March 3rd."
    assert result["recall_event"]["type"] == "memory_recall"
    assert len(result["recall_event"]["entries"]) >= 1


def test_selector():
    result = run("selector")
    assert (result["choice"], result["fallback"], result["replayed"]) == (
        "billing",
        False,
        "billing",
    )
    assert result["answer"] == "Your last invoice was paid on the 1st."


def test_durable_run():
    from openrath_project.examples import durable_run

    durable_run.SENT.clear()
    result = run("durable_run")
    assert result["waited"] == "waiting"
    assert result["status"] == "succeeded"
    assert result["sent"] == ["March launch"]
    assert result["output"]["approved_by"] == "user:example"


def test_research_team(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    result = run("research_team")
    assert result["status"] == "succeeded"
    assert result["branches"] == ["market", "technology"]
    output = result["output"]
    assert set(output["findings"]) == {"market", "technology"}
    assert output["approved_by"] == "user:example"
    report = (tmp_path / "reports" / f"{result['run']}.md").read_text()
    assert report.startswith("# Research report\n\nReport: launch in Europe in Q3.")
    for topic in ("market", "technology"):  # each branch run had its own workspace
        (notes,) = (tmp_path / "workspaces").glob(f"*/{topic}/notes.md")
        assert notes.read_text().startswith(topic.capitalize()[:4])
