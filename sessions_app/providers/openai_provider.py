"""The ``openai`` provider: any OpenAI-compatible chat-completions endpoint via the official SDK.

Configuration, highest precedence first:

1. explicit keyword arguments (``model``, ``base_url``, ``api_key_env``, ``timeout``, ...);
2. the environment: ``OPENAI_DEFAULT_MODEL``, ``OPENAI_BASE_URL`` (and the key, read from the
   variable named by ``api_key_env``, default ``OPENAI_API_KEY``);
3. the JSON file named by ``OPENRATH_PROVIDER_CONFIG`` (default ``~/.openrath/providers.json``),
   section ``"openai"``: ``{"base_url", "model", "api_key_env", "timeout", "max_retries"}``;
4. OpenRath's ``config.json`` (``openrath_config``): the default ``llm`` provider when it is of
   this kind, else the first entry of this kind (its ``model``, ``base_url`` and ``api_key``).

The API key is normally a *secret reference*: the provider keeps the environment variable's name
and reads the value only when it builds the SDK client. A key given in-process (OpenRath's
``Provider(api_key=...)``) or read from ``config.json`` is held in this object's memory only
(never persisted). Precedence: the in-process key, then the environment variable, then
``config.json``. No key ever appears in ``repr``, errors, logs or anything the provider returns.

The SDK's own retries are off; this module retries 429, 5xx, connection errors and timeouts with
capped exponential backoff and jitter, honouring ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import hashlib
import importlib
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import openai

from openrath_project.secretfiles import SecretFileError, secret_value
from sessions_app.providers.base import (
    DeltaCallback,
    EventCallback,
    ModelTurn,
    Provider,
    ProviderError,
    ProviderRequestError,
    ProviderUnavailable,
    StreamDelta,
    ToolCallRequest,
    Usage,
)
from sessions_app.providers.openrath_config import (
    LLMEntry,
    OpenRathConfigError,
    load_openrath_config,
)

logger = logging.getLogger(__name__)

KIND = "openai"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_CONFIG_PATH = "~/.openrath/providers.json"
CONFIG_PATH_ENV = "OPENRATH_PROVIDER_CONFIG"
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_RETRIES = 4
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 8.0

_FILE_KEYS = frozenset({"base_url", "model", "api_key_env", "timeout", "max_retries"})
# Arguments the provider sets itself; accepting them as extras would silently fight it.
_RESERVED_CREATE_ARGS = frozenset(
    {"model", "messages", "tools", "stream", "stream_options", "timeout", "extra_headers"}
)
# 408 is the server timing the request out: a timeout, so retried like one.
_RETRYABLE_STATUS = frozenset({408, 429})


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP library's transport errors, which a broken stream raises unwrapped mid-iteration.

    openai 3.x is built on ``httpx2``, earlier majors on ``httpx``; whichever is installed counts.
    """
    errors: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        errors.append(module.TransportError)
    return tuple(errors)


# A timeout is an APIConnectionError too (APITimeoutError subclasses it).
_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    openai.APIConnectionError,
    *_transport_errors(),
)


class ProviderConfigError(ProviderError, ValueError):
    """The provider cannot be configured: no model, no key, or an unreadable config file."""


@dataclass(frozen=True)
class OpenAIConfig:
    """The resolved, secret-free configuration of one provider instance."""

    model: str
    base_url: str | None
    api_key_env: str
    timeout: float
    max_retries: int


def load_config_file(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The ``"openai"`` section of the provider config file (empty when the default is absent)."""
    explicit = path is not None or bool(os.environ.get(CONFIG_PATH_ENV))
    raw_path = path if path is not None else os.environ.get(CONFIG_PATH_ENV) or DEFAULT_CONFIG_PATH
    file_path = Path(raw_path).expanduser()
    if not file_path.exists():
        if explicit:
            raise ProviderConfigError(f"provider config file {file_path} does not exist")
        return {}
    try:
        document = json.loads(file_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProviderConfigError(f"cannot read provider config file {file_path}: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderConfigError(f"provider config file {file_path} must hold a JSON object")
    section = document.get(KIND, {})
    if not isinstance(section, dict):
        raise ProviderConfigError(f"{file_path}: the {KIND!r} section must be a JSON object")
    unknown = sorted(set(section) - _FILE_KEYS)
    if unknown:
        raise ProviderConfigError(
            f"{file_path}: unknown keys in the {KIND!r} section: {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(_FILE_KEYS))})"
        )
    return section


def resolve_config(
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
    config_path: str | os.PathLike[str] | None = None,
    openrath_entry: LLMEntry | None = None,
    env_prefix: str = "OPENAI",
    default_base_url: str | None = None,
    base_url_env: str | None = "OPENAI_BASE_URL",
) -> OpenAIConfig:
    """Apply the precedence explicit > environment > config file > OpenRath's ``config.json``
    entry > defaults. ``env_prefix`` names the variables (``OPENAI_DEFAULT_MODEL``, ...)."""
    file_config = load_config_file(config_path)
    entry_model = openrath_entry.model if openrath_entry is not None else None
    entry_base_url = openrath_entry.base_url if openrath_entry is not None else None
    resolved_model = (
        model
        or os.environ.get(f"{env_prefix}_DEFAULT_MODEL")
        or file_config.get("model")
        or entry_model
    )
    if not resolved_model:
        raise ProviderConfigError(
            f"no model configured for the openai provider: pass model=..., set "
            f"{env_prefix}_DEFAULT_MODEL, or add 'model' to the 'openai' section of the "
            "config file (or to the llm provider in ~/.openrath/config.json)"
        )
    resolved_base_url = (
        base_url
        or (os.environ.get(base_url_env) if base_url_env else None)
        or file_config.get("base_url")
        or entry_base_url
        or default_base_url
        or None
    )
    resolved_key_env = api_key_env or file_config.get("api_key_env") or f"{env_prefix}_API_KEY"
    resolved_timeout = float(
        timeout if timeout is not None else file_config.get("timeout", DEFAULT_TIMEOUT_SECONDS)
    )
    resolved_retries = int(
        max_retries
        if max_retries is not None
        else file_config.get("max_retries", DEFAULT_MAX_RETRIES)
    )
    if resolved_timeout <= 0:
        raise ProviderConfigError(f"timeout must be positive, got {resolved_timeout}")
    if resolved_retries < 0:
        raise ProviderConfigError(f"max_retries must be >= 0, got {resolved_retries}")
    return OpenAIConfig(
        model=str(resolved_model),
        base_url=str(resolved_base_url) if resolved_base_url else None,
        api_key_env=str(resolved_key_env),
        timeout=resolved_timeout,
        max_retries=resolved_retries,
    )


def backoff_delay(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based).

    A server's ``Retry-After`` wins (capped, so a hostile or confused server cannot park a worker
    for an hour); otherwise exponential from 0.5 s to 8 s with "equal jitter" (half fixed, half
    random) so simultaneous clients spread out but never retry immediately.
    """
    if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
        return min(retry_after, BACKOFF_CAP_SECONDS)
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * (2**attempt))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``, in seconds; None if absent."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _api_error_message(exc: openai.APIStatusError) -> str:
    """The API's own error message from the body, falling back to the SDK's."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return exc.message


@dataclass(frozen=True)
class Gateway:
    """An OpenAI-compatible endpoint registered as a provider kind of its own."""

    env_prefix: str  # <prefix>_API_KEY and <prefix>_DEFAULT_MODEL
    base_url: str
    #: The variable that overrides the URL (None: the SDK-style variable means something else).
    base_url_env: str | None


GATEWAYS: dict[str, Gateway] = {
    "atlascloud": Gateway("ATLASCLOUD", "https://api.atlascloud.ai/v1", "ATLASCLOUD_BASE_URL"),
    # Anthropic's OpenAI-compatible endpoint: no extra SDK. ANTHROPIC_BASE_URL is not read: for
    # the anthropic SDK it names the API root, which is not this endpoint.
    "anthropic": Gateway("ANTHROPIC", "https://api.anthropic.com/v1/", None),
}


def _openrath_entry(kind: str) -> LLMEntry | None:
    try:
        return load_openrath_config().provider_for_kind(kind)
    except OpenRathConfigError as exc:
        raise ProviderConfigError(str(exc)) from None


class OpenAIProvider(Provider):
    """Chat completions with tools and streaming against an OpenAI-compatible endpoint."""

    kind = KIND

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        temperature: float | None = None,
        config_path: str | os.PathLike[str] | None = None,
        gateway: str | None = None,
        **create_args: Any,
    ) -> None:
        reserved = sorted(set(create_args) & _RESERVED_CREATE_ARGS)
        if reserved:
            raise ValueError(f"the openai provider sets these itself: {', '.join(reserved)}")
        if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
            raise ProviderConfigError("api_key must be a non-empty string (or leave it out)")
        if gateway is not None and gateway not in GATEWAYS:
            raise ValueError(f"unknown OpenAI-compatible gateway {gateway!r}")
        self.kind = gateway or KIND
        route = GATEWAYS.get(self.kind, Gateway("OPENAI", "", "OPENAI_BASE_URL"))
        entry = _openrath_entry(self.kind)
        self.config = resolve_config(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            timeout=timeout,
            max_retries=max_retries,
            config_path=config_path,
            openrath_entry=entry,
            env_prefix=route.env_prefix,
            default_base_url=route.base_url or None,
            base_url_env=route.base_url_env,
        )
        self.model = self.config.model
        # In memory only: never in config, repr, chunks or logs (see _api_key and _redact).
        self._explicit_key = api_key.strip() if api_key else None
        self._config_key = entry.api_key if entry is not None else None
        self.create_args: dict[str, Any] = dict(create_args)
        if temperature is None and entry is not None:
            temperature = entry.temperature
        if temperature is not None:
            self.create_args["temperature"] = temperature
        if entry is not None and entry.max_tokens is not None:
            self.create_args.setdefault("max_tokens", entry.max_tokens)
        self._client: openai.OpenAI | None = None
        self._client_key_digest = ""
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        name = "OpenAIProvider" if self.kind == KIND else f"OpenAIProvider[{self.kind}]"
        key = " api_key=<in memory>" if self._explicit_key else ""
        return (
            f"<{name} model={self.model!r} base_url={self.config.base_url!r} "
            f"api_key_env={self.config.api_key_env!r}{key}>"
        )

    # -- client ---------------------------------------------------------------------------------

    def _env_key(self) -> str:
        # The variable, or the file its ``<name>_FILE`` names (the key then stays out of the
        # process environment); read on each call, so a rotated key is picked up.
        try:
            return secret_value(self.config.api_key_env) or ""
        except SecretFileError as exc:
            raise ProviderConfigError(str(exc)) from None

    def _api_key(self) -> str:
        key = self._explicit_key or self._env_key() or self._config_key or ""
        if not key:
            raise ProviderConfigError(
                f"the API key environment variable {self.config.api_key_env} is not set"
            )
        return key

    def credential_available(self) -> bool:
        try:
            return bool(self._api_key())
        except ProviderConfigError:
            return False

    def _get_client(self) -> openai.OpenAI:
        """The SDK client, rebuilt when the key in the environment changes (rotation)."""
        key = self._api_key()
        digest = hashlib.sha256(key.encode()).hexdigest()
        with self._client_lock:
            if self._client is None or digest != self._client_key_digest:
                if self._client is not None:
                    self._client.close()  # the rotated-out key's connection pool
                self._client = openai.OpenAI(
                    api_key=key,
                    base_url=self.config.base_url,
                    timeout=self.config.timeout,
                    max_retries=0,
                )
                self._client_key_digest = digest
            return self._client

    def _redact(self, text: str) -> str:
        try:
            env_key = secret_value(self.config.api_key_env) or ""
        except SecretFileError:
            env_key = ""
        for key in (self._explicit_key, env_key, self._config_key):
            if key and len(key) >= 4:
                text = text.replace(key, "[redacted]")
        return text

    # -- calls ----------------------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        return self._call(messages, tools, on_delta=on_delta, on_event=None)

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_event: EventCallback,
    ) -> ModelTurn:
        """Stream, passing each text fragment and tool-call piece on as the API sends it."""
        return self._call(messages, tools, on_delta=None, on_event=on_event)

    def _call(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        on_delta: DeltaCallback | None,
        on_event: EventCallback | None,
    ) -> ModelTurn:
        client = self._get_client()
        request: dict[str, Any] = {"model": self.model, "messages": messages, **self.create_args}
        if tools:
            request["tools"] = tools
        if on_event is not None:
            events = on_event

            def on_delta(text: str) -> None:
                events(StreamDelta(content_delta=text))

        if on_delta is not None:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}

        attempts = self.config.max_retries + 1
        last_reason = ""
        for attempt in range(attempts):
            emitted = [False]
            try:
                if on_delta is not None:
                    return self._complete_streaming(
                        client, request, on_delta, emitted, on_event=on_event
                    )
                return self._complete_once(client, request)
            except openai.APIStatusError as exc:
                status = exc.status_code
                message = self._redact(_api_error_message(exc))
                if not (status in _RETRYABLE_STATUS or status >= 500):
                    raise ProviderRequestError(
                        f"model API returned HTTP {status}: {message}", status_code=status
                    ) from None
                last_reason = f"HTTP {status}: {message}"
                retry_after = parse_retry_after(dict(exc.response.headers))
            except _CONNECTION_ERRORS as exc:
                last_reason = f"{type(exc).__name__}: {self._redact(str(exc))}"
                retry_after = None
            except openai.APIError as exc:
                # An error event inside a stream: the API answered, so retrying is not indicated.
                raise ProviderError(f"model API error: {self._redact(exc.message)}") from None
            if emitted[0]:
                # Retrying would replay deltas the caller has already shown; fail instead.
                raise ProviderUnavailable(
                    f"model API stream broke after partial output ({last_reason})"
                )
            if attempt + 1 < attempts:
                delay = backoff_delay(attempt, retry_after)
                logger.warning(
                    "openai provider: attempt %d/%d failed (%s); retrying in %.2fs",
                    attempt + 1,
                    attempts,
                    last_reason,
                    delay,
                )
                time.sleep(delay)
        raise ProviderUnavailable(
            f"model API unavailable after {attempts} attempt(s): {last_reason}"
        )

    def _complete_once(self, client: openai.OpenAI, request: dict[str, Any]) -> ModelTurn:
        response = cast(Any, client.chat.completions).create(**request)
        if not response.choices:
            raise ProviderError("model API returned no choices")
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolCallRequest(
                id=call.id,
                name=call.function.name,
                arguments=call.function.arguments or "",
            )
            for call in (message.tool_calls or ())
            if getattr(call, "function", None) is not None
        )
        return ModelTurn(
            text=message.content,
            tool_calls=calls,
            usage=_usage(response.usage),
            model=response.model or self.model,
            provider=self.kind,
            finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
        )

    def _complete_streaming(
        self,
        client: openai.OpenAI,
        request: dict[str, Any],
        on_delta: DeltaCallback,
        emitted: list[bool],
        *,
        on_event: EventCallback | None = None,
    ) -> ModelTurn:
        stream = cast(Any, client.chat.completions).create(**request)
        text_parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = Usage()
        finish_reason = ""
        model = self.model
        try:
            for chunk in stream:
                if getattr(chunk, "model", None):
                    model = chunk.model
                if getattr(chunk, "usage", None) is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices or ():
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        text_parts.append(delta.content)
                        emitted[0] = True
                        on_delta(delta.content)
                    for part in delta.tool_calls or ():
                        slot = calls.setdefault(part.index, {"id": "", "name": "", "args": []})
                        if part.id:
                            slot["id"] = part.id
                        name_piece = args_piece = None
                        if part.function is not None:
                            if part.function.name:
                                name_piece = part.function.name
                                slot["name"] += name_piece
                            if part.function.arguments:
                                args_piece = part.function.arguments
                                slot["args"].append(args_piece)
                        if on_event is not None:
                            emitted[0] = True
                            on_event(
                                StreamDelta(
                                    tool_call_index=part.index,
                                    tool_call_id=part.id or None,
                                    tool_call_name_delta=name_piece,
                                    tool_call_args_delta=args_piece,
                                )
                            )
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()
        tool_calls = tuple(
            ToolCallRequest(
                id=slot["id"] or f"call_{index}",
                name=slot["name"],
                arguments="".join(slot["args"]),
            )
            for index, slot in sorted(calls.items())
        )
        turn = ModelTurn(
            text="".join(text_parts) if text_parts else None,
            tool_calls=tool_calls,
            usage=usage,
            model=model,
            provider=self.kind,
            finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
        )
        if on_event is not None:
            on_event(StreamDelta(finish_reason=turn.finish_reason))
            on_event(StreamDelta(usage=turn.usage))
        return turn


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    completion = int(getattr(raw, "completion_tokens", 0) or 0)
    total = int(getattr(raw, "total_tokens", 0) or 0) or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)
