"""OpenRath's ``Provider(model=, provider_kind=, api_key=, base_url=)`` and ``config.json``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from openrath_project import flow
from openrath_project.llm import Provider, RathLLMTokenUsage, add_usage
from sessions_app.providers import ProviderConfigError, ProviderRequestError, ScriptedProvider
from sessions_app.providers.openai_provider import OpenAIProvider
from sessions_app.providers.openrath_config import OpenRathConfigError, load_openrath_config
from tests.sessions_app.providers.fake_openai import FakeOpenAI, Reply, completion

KEY = "sk-config-file-key-9911"


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    directory = tmp_path / "home"
    directory.mkdir()
    monkeypatch.setenv("OPENRATH_HOME", str(directory))
    empty = tmp_path / "providers.json"
    empty.write_text("{}")
    monkeypatch.setenv("OPENRATH_PROVIDER_CONFIG", str(empty))
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_DEFAULT_MODEL",
        "ANTHROPIC_API_KEY",
        "ATLASCLOUD_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    return directory


def write_config(home: Path, providers: dict[str, Any], default: str | None = None) -> None:
    document = {"version": 1, "llm": {"default_provider": default, "providers": providers}}
    (home / "config.json").write_text(json.dumps(document))


def test_one_name_for_openraths_and_todays_forms(home: Path) -> None:
    openrath = Provider(model="gpt-5.5", provider_kind="openai", base_url="http://h/v1")
    today = flow.Provider(kind="scripted", fixture=[{"text": "hi"}])

    assert isinstance(openrath, OpenAIProvider)
    assert isinstance(today, ScriptedProvider)
    assert isinstance(openrath, Provider)
    assert isinstance(today, flow.Provider)
    assert flow.Provider is Provider
    assert (str(openrath), openrath.provider_kind, openrath.config.base_url) == (
        "gpt-5.5",
        "openai",
        "http://h/v1",
    )
    keyed = Provider(model="m", api_key_env="MY_KEY")
    assert keyed.config.api_key_env == "MY_KEY"
    with pytest.raises(ValueError, match="disagree"):
        Provider(kind="openai", provider_kind="scripted")
    with pytest.raises(ValueError, match="unknown provider kind 'litellm'; known kinds: "):
        Provider(provider_kind="litellm", model="m")
    assert add_usage(None, RathLLMTokenUsage(1, 2, 3)) == RathLLMTokenUsage(1, 2, 3)


def test_gateway_kinds_are_openai_compatible_endpoints(home: Path) -> None:
    atlas = Provider(provider_kind="atlascloud", model="deepseek-v3")
    claude = Provider(provider_kind="anthropic", model="claude-opus-4-7", max_tokens=256)

    assert (atlas.config.base_url, atlas.config.api_key_env) == (
        "https://api.atlascloud.ai/v1",
        "ATLASCLOUD_API_KEY",
    )
    assert (claude.config.base_url, claude.config.api_key_env) == (
        "https://api.anthropic.com/v1/",
        "ANTHROPIC_API_KEY",
    )
    assert claude.create_args == {"max_tokens": 256}
    assert (atlas.provider_kind, claude.provider_kind) == ("atlascloud", "anthropic")
    assert claude.credential_available() is False


def test_config_json_supplies_what_nothing_else_does_and_env_wins(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(
        home,
        {
            "other": {"provider_kind": "anthropic", "model": "claude"},
            "main": {"provider_kind": "openai", "model": "gpt-conf", "base_url": "http://c/v1"},
        },
        default="main",
    )
    (home / "credentials.json").write_text(json.dumps({"llm": {"providers": {"main": KEY}}}))

    from_file = Provider()
    assert (from_file.model, from_file.config.base_url) == ("gpt-conf", "http://c/v1")
    assert from_file._api_key() == KEY
    assert KEY not in repr(from_file)

    monkeypatch.setenv("OPENAI_DEFAULT_MODEL", "gpt-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-1")
    from_env = Provider()
    assert (from_env.model, from_env.config.base_url, from_env._api_key()) == (
        "gpt-env",
        "http://env/v1",
        "sk-env-key-1",
    )
    explicit = Provider(model="gpt-x", api_key="sk-explicit-2")
    assert explicit._api_key() == "sk-explicit-2"  # in-process beats the environment


def test_a_broken_config_file_is_one_clear_error(home: Path) -> None:
    (home / "config.json").write_text('{"llm": {"providers": {"a": {"model": 5}}}}')
    with pytest.raises(ProviderConfigError, match=r"llm.providers.a: 'model' has the wrong type"):
        Provider(model="m")
    (home / "config.json").write_text("[]")
    with pytest.raises(OpenRathConfigError, match="must hold a JSON object"):
        load_openrath_config()


def test_an_in_process_key_is_used_and_never_logged(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-in-memory-5150"
    with FakeOpenAI() as api:
        api.replies.append(
            Reply(status=401, body={"error": {"message": f"Incorrect API key: {secret}"}})
        )
        api.replies.append(Reply(body=completion(content="ok")))
        provider = Provider(model="gpt-test", api_key=secret, base_url=api.base_url)
        with caplog.at_level(logging.DEBUG), pytest.raises(ProviderRequestError) as caught:
            provider.complete([{"role": "user", "content": "hi"}])
        turn = provider.complete([{"role": "user", "content": "hi"}])

    assert turn.text == "ok"
    assert [r.headers["authorization"] for r in api.requests] == [f"Bearer {secret}"] * 2
    assert secret not in str(caught.value)
    assert "[redacted]" in str(caught.value)
    assert secret not in caplog.text
    assert secret not in repr(provider)
    assert secret not in str(provider)
