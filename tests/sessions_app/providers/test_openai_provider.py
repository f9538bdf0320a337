"""The openai provider through the real openai SDK against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sessions_app.providers import (
    ModelTurn,
    OpenAIProvider,
    ProviderConfigError,
    ProviderRequestError,
    ProviderUnavailable,
    ToolCallRequest,
    Usage,
    make_provider,
)
from sessions_app.providers.openai_provider import (
    BACKOFF_CAP_SECONDS,
    backoff_delay,
    parse_retry_after,
)
from tests.sessions_app.providers.fake_openai import FakeOpenAI, Reply, chunk, completion

SECRET = "sk-test-SECRET-value-4242"
USER = [{"role": "user", "content": "Say hello"}]
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A known environment: the test key set, no base URL or model, an empty config file."""
    config = tmp_path / "providers.json"
    config.write_text("{}")
    monkeypatch.setenv("OPENRATH_PROVIDER_CONFIG", str(config))
    # OpenRath's config.json is looked up here (an empty directory): not the machine's.
    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path / "openrath-home"))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_DEFAULT_MODEL", raising=False)
    return config


@pytest.fixture
def api() -> FakeOpenAI:
    with FakeOpenAI() as server:
        yield server


def provider_for(api: FakeOpenAI, **options: object) -> OpenAIProvider:
    provider = make_provider("openai", model="gpt-test", base_url=api.base_url, **options)
    assert isinstance(provider, OpenAIProvider)
    return provider


def test_plain_answer(api: FakeOpenAI) -> None:
    api.replies.append(Reply(body=completion(content="Hello there", usage=(12, 3))))
    provider = provider_for(api, temperature=0.2)

    turn = provider.complete(USER)

    assert turn == ModelTurn(
        text="Hello there",
        tool_calls=(),
        usage=Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15),
        model="gpt-test",
        provider="openai",
        finish_reason="stop",
    )
    assert len(api.requests) == 1
    request = api.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.body == {"model": "gpt-test", "messages": USER, "temperature": 0.2}
    assert request.headers["authorization"] == f"Bearer {SECRET}"


def test_streamed_answer_calls_on_delta_and_returns_the_whole_turn(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(
            sse=[
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hel"}),
                chunk({"content": "lo, "}),
                chunk({"content": "world"}),
                chunk({}, finish_reason="stop"),
                chunk(None, usage=(7, 4)),
            ]
        )
    )
    deltas: list[str] = []

    turn = provider_for(api).complete(USER, on_delta=deltas.append)

    assert deltas == ["Hel", "lo, ", "world"]
    assert turn == ModelTurn(
        text="Hello, world",
        tool_calls=(),
        usage=Usage(prompt_tokens=7, completion_tokens=4, total_tokens=11),
        model="gpt-test",
        provider="openai",
        finish_reason="stop",
    )
    assert api.requests[0].body == {
        "model": "gpt-test",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_tool_call_round_trip(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(
            body=completion(
                content=None,
                tool_calls=[
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    }
                ],
                finish_reason="tool_calls",
                usage=(20, 8),
            )
        )
    )
    api.replies.append(Reply(body=completion(content="2 + 3 = 5", usage=(30, 6))))
    provider = provider_for(api)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]

    first = provider.complete(messages, [ADD_TOOL])

    assert first == ModelTurn(
        text=None,
        tool_calls=(ToolCallRequest(id="call_abc", name="add", arguments='{"a": 2, "b": 3}'),),
        usage=Usage(prompt_tokens=20, completion_tokens=8, total_tokens=28),
        model="gpt-test",
        provider="openai",
        finish_reason="tool_calls",
    )
    messages.append(first.as_message())
    messages.append({"role": "tool", "tool_call_id": "call_abc", "content": "5"})

    second = provider.complete(messages, [ADD_TOOL])

    assert second.text == "2 + 3 = 5"
    assert second.tool_calls == ()
    assert first.usage + second.usage == Usage(50, 14, 64)
    assert [request.body for request in api.requests] == [
        {
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "What is 2 + 3?"}],
            "tools": [ADD_TOOL],
        },
        {
            "model": "gpt-test",
            "messages": [
                {"role": "user", "content": "What is 2 + 3?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_abc", "content": "5"},
            ],
            "tools": [ADD_TOOL],
        },
    ]


def test_streamed_tool_calls_are_assembled_by_index(api: FakeOpenAI) -> None:
    def call_delta(index: int, **fields: object) -> dict[str, object]:
        return {"tool_calls": [{"index": index, **fields}]}

    api.replies.append(
        Reply(
            sse=[
                chunk({"role": "assistant", "content": None}),
                chunk(call_delta(0, id="call_0", type="function", function={"name": "add"})),
                chunk(call_delta(1, id="call_1", type="function", function={"name": "add"})),
                chunk(call_delta(0, function={"arguments": '{"a": 1,'}), model="gpt-test"),
                chunk(call_delta(1, function={"arguments": '{"a": 10, "b": 20}'})),
                chunk(call_delta(0, function={"arguments": ' "b": 2}'})),
                chunk({}, finish_reason="tool_calls"),
                chunk(None, usage=(9, 9)),
            ]
        )
    )
    deltas: list[str] = []

    turn = provider_for(api).complete(USER, [ADD_TOOL], on_delta=deltas.append)

    assert deltas == []
    assert turn.text is None
    assert turn.tool_calls == (
        ToolCallRequest(id="call_0", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCallRequest(id="call_1", name="add", arguments='{"a": 10, "b": 20}'),
    )
    assert turn.finish_reason == "tool_calls"
    assert turn.usage == Usage(9, 9, 18)


def test_a_stream_broken_after_output_is_not_replayed(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(
            sse=[chunk({"role": "assistant", "content": "Par"}), chunk({"content": "tial"})],
            cut_stream=True,
        )
    )
    api.replies.append(Reply(body=completion(content="must not be used")))
    deltas: list[str] = []

    with pytest.raises(ProviderUnavailable) as caught:
        provider_for(api).complete(USER, on_delta=deltas.append)

    assert deltas == ["Par", "tial"]
    assert str(caught.value).startswith("model API stream broke after partial output (")
    assert len(api.requests) == 1


def test_429_with_retry_after_is_retried_then_succeeds(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(
            status=429,
            body={"error": {"message": "Rate limit reached", "type": "rate_limit"}},
            headers={"Retry-After": "0"},
        )
    )
    api.replies.append(Reply(body=completion(content="finally")))

    turn = provider_for(api).complete(USER)

    assert turn.text == "finally"
    assert len(api.requests) == 2
    assert api.requests[0].body == api.requests[1].body == {"model": "gpt-test", "messages": USER}


def test_400_raises_request_error_without_retry(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(
            status=400,
            body={
                "error": {
                    "message": "Invalid value for 'messages': must not be empty",
                    "type": "invalid_request_error",
                }
            },
        )
    )
    api.replies.append(Reply(body=completion(content="must not be used")))
    provider = provider_for(api)

    with pytest.raises(ProviderRequestError) as caught:
        provider.complete(USER)

    assert str(caught.value) == (
        "model API returned HTTP 400: Invalid value for 'messages': must not be empty"
    )
    assert caught.value.status_code == 400
    assert len(api.requests) == 1
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)
    assert caught.value.__cause__ is None
    assert SECRET not in repr(provider)
    assert SECRET not in str(provider)


def test_an_error_echoing_the_key_is_redacted(api: FakeOpenAI) -> None:
    api.replies.append(
        Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {SECRET}"}})
    )

    with pytest.raises(ProviderRequestError) as caught:
        provider_for(api).complete(USER)

    assert str(caught.value) == (
        "model API returned HTTP 401: Incorrect API key provided: [redacted]"
    )


def test_5xx_until_retries_run_out_raises_unavailable(api: FakeOpenAI) -> None:
    for _ in range(3):
        api.replies.append(
            Reply(
                status=503, body={"error": {"message": "overloaded"}}, headers={"Retry-After": "0"}
            )
        )

    with pytest.raises(ProviderUnavailable) as caught:
        provider_for(api, max_retries=2).complete(USER)

    assert str(caught.value) == "model API unavailable after 3 attempt(s): HTTP 503: overloaded"
    assert len(api.requests) == 3


def test_connection_refused_is_unavailable_after_retries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed again: every attempt is refused at once. The timeout is generous so that
    # a loaded machine cannot turn the refusal into an APITimeoutError.
    provider = make_provider(
        "openai", model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, timeout=30
    )

    with pytest.raises(ProviderUnavailable) as caught:
        provider.complete(USER)

    assert str(caught.value).startswith("model API unavailable after 2 attempt(s): APIConnection")
    assert SECRET not in str(caught.value)


def test_config_precedence_explicit_over_env_over_file(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    clean_env.write_text(
        json.dumps(
            {
                "openai": {
                    "base_url": "http://file.invalid/v1",
                    "model": "file-model",
                    "api_key_env": "FILE_KEY_VAR",
                }
            }
        )
    )
    from_file = OpenAIProvider()
    assert (from_file.model, from_file.config.base_url, from_file.config.api_key_env) == (
        "file-model",
        "http://file.invalid/v1",
        "FILE_KEY_VAR",
    )

    monkeypatch.setenv("OPENAI_DEFAULT_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
    from_env = OpenAIProvider()
    assert (from_env.model, from_env.config.base_url) == ("env-model", "http://env.invalid/v1")

    explicit = OpenAIProvider(
        model="explicit-model", base_url="http://explicit.invalid/v1", api_key_env="MY_KEY"
    )
    assert (explicit.model, explicit.config.base_url, explicit.config.api_key_env) == (
        "explicit-model",
        "http://explicit.invalid/v1",
        "MY_KEY",
    )
    assert explicit.config.timeout == 60.0
    assert explicit.config.max_retries == 4


def test_the_key_is_read_from_the_named_variable(
    api: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_LLM_KEY", "sk-team-key-777")
    api.replies.append(Reply(body=completion(content="ok")))

    provider_for(api, api_key_env="TEAM_LLM_KEY").complete(USER)

    assert api.requests[0].headers["authorization"] == "Bearer sk-team-key-777"


def test_the_key_can_come_from_a_file(
    api: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``<name>_FILE`` keeps the key out of the worker's environment (issue 14, item 7)."""
    key_file = tmp_path / "openai_key"
    key_file.write_text("sk-from-file-888\n")
    monkeypatch.delenv("TEAM_LLM_KEY", raising=False)
    monkeypatch.setenv("TEAM_LLM_KEY_FILE", str(key_file))
    api.replies.append(Reply(body=completion(content="ok")))

    provider_for(api, api_key_env="TEAM_LLM_KEY").complete(USER)

    assert api.requests[0].headers["authorization"] == "Bearer sk-from-file-888"
    monkeypatch.setenv("TEAM_LLM_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ProviderConfigError, match="TEAM_LLM_KEY_FILE=.* cannot be read"):
        provider_for(api, api_key_env="TEAM_LLM_KEY").complete(USER)
    assert len(api.requests) == 1


def test_a_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    provider = OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1")

    with pytest.raises(ProviderConfigError) as caught:
        provider.complete(USER)

    assert str(caught.value) == "the API key environment variable OPENAI_API_KEY is not set"


def test_no_model_anywhere_is_a_config_error() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIProvider()
    assert "OPENAI_DEFAULT_MODEL" in str(caught.value)


def test_make_provider_defaults_to_openai() -> None:
    provider = make_provider(model="m")
    assert isinstance(provider, OpenAIProvider)
    assert repr(provider) == "<OpenAIProvider model='m' base_url=None api_key_env='OPENAI_API_KEY'>"


def test_an_in_process_api_key_is_held_in_memory_and_never_shown() -> None:
    provider = make_provider("openai", model="m", api_key=SECRET)
    assert repr(provider) == (
        "<OpenAIProvider model='m' base_url=None api_key_env='OPENAI_API_KEY' api_key=<in memory>>"
    )
    assert SECRET not in repr(vars(provider.config))
    assert provider.credential_available() is True
    assert provider._redact(f"bad key {SECRET}") == "bad key [redacted]"


def test_unknown_config_file_keys_are_reported(clean_env: Path) -> None:
    clean_env.write_text(json.dumps({"openai": {"modle": "typo"}}))
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIProvider(model="m")
    assert "unknown keys in the 'openai' section: modle" in str(caught.value)


def test_backoff_delay_bounds() -> None:
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = [backoff_delay(attempt) for _ in range(200)]
        assert min(delays) >= ceiling / 2
        assert max(delays) <= ceiling
    assert backoff_delay(0, retry_after=3.0) == 3.0
    assert backoff_delay(0, retry_after=600.0) == BACKOFF_CAP_SECONDS


def test_parse_retry_after() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT"}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
