"""OpenRath's ``config.json`` (``rath.config.store.ConfigStore``), read-only.

Where the file is, first match wins: ``$OPENRATH_HOME/config.json``; ``./.openrath/config.json``
when that *file* exists (``./.openrath`` is also our embedded data directory, so the directory
alone does not count); ``~/.openrath/config.json``. A missing file is an empty configuration.
API keys may sit inline or in a sibling ``credentials.json`` (``{"llm": {"providers":
{"<name>": "<key>"}}}``); inline wins. The sections and fields are OpenRath's (``llm``,
``mcp``, ``memory``, ``backend``); unknown fields are kept in ``extra``.

Keys read here stay in this process's memory: the store is never written back, and nothing
here logs a value (``save()`` is refused with the reason). Pure Python: no Django import.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "CONFIG_FILENAME",
    "CREDENTIALS_FILENAME",
    "OPENRATH_HOME_ENV",
    "BackendConfig",
    "BackendProviderConfig",
    "ConfigError",
    "ConfigStore",
    "LLMConfig",
    "LLMProviderConfig",
    "MCPConfig",
    "MCPServerConfig",
    "MemoryConfig",
    "MemoryProviderConfig",
    "RathConfig",
    "default_store",
    "resolve_config_path",
]

OPENRATH_HOME_ENV = "OPENRATH_HOME"
CONFIG_FILENAME = "config.json"
CREDENTIALS_FILENAME = "credentials.json"
DIR_NAME = ".openrath"


class ConfigError(RuntimeError):
    """The configuration file exists but cannot be used (not JSON, wrong shape)."""


def resolve_config_path() -> Path:
    home = os.environ.get(OPENRATH_HOME_ENV, "").strip()
    if home:
        path = Path(home).expanduser().resolve()
        if path.exists() and not path.is_dir():
            raise FileNotFoundError(f"{OPENRATH_HOME_ENV}={home!r} is not a directory")
        return path / CONFIG_FILENAME
    local = Path.cwd() / DIR_NAME / CONFIG_FILENAME
    if local.is_file():
        return local.resolve()
    return Path.home() / DIR_NAME / CONFIG_FILENAME


def _section(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object, got {type(raw).__name__}")
    return raw


def _optional_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}.{key} must be a string")


def _extra(raw: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in known}


@dataclass(frozen=True)
class LLMProviderConfig:
    """One ``llm.providers`` entry. ``repr`` never shows the key."""

    provider_kind: str = "openai"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    _KNOWN: ClassVar[set[str]] = {
        "provider_kind", "model", "api_key", "base_url", "temperature", "max_tokens"
    }  # fmt: skip

    @classmethod
    def parse(cls, raw: Any, where: str) -> LLMProviderConfig:
        data = _section(raw, where)
        kind = data.get("provider_kind", "openai")
        if not isinstance(kind, str):
            raise ConfigError(f"{where}.provider_kind must be a string")
        temperature = data.get("temperature")
        max_tokens = data.get("max_tokens")
        if temperature is not None and not isinstance(temperature, int | float):
            raise ConfigError(f"{where}.temperature must be a number")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
        ):
            raise ConfigError(f"{where}.max_tokens must be an integer")
        return cls(
            provider_kind=kind,
            model=_optional_str(data, "model", where),
            api_key=_optional_str(data, "api_key", where),
            base_url=_optional_str(data, "base_url", where),
            temperature=None if temperature is None else float(temperature),
            max_tokens=max_tokens,
            extra=_extra(data, cls._KNOWN),
        )


@dataclass(frozen=True)
class LLMConfig:
    default_provider: str | None = None
    embedding_provider: str | None = None
    vlm_provider: str | None = None
    providers: dict[str, LLMProviderConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class MCPServerConfig:
    command: list[str]
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class MCPConfig:
    default_enabled: list[str] = field(default_factory=list)
    servers: dict[str, MCPServerConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryProviderConfig:
    backend_kind: str = "local"
    path: str | None = None
    embedding_provider: str | None = None
    chat_provider: str | None = None


@dataclass(frozen=True)
class MemoryConfig:
    default_provider: str | None = None
    providers: dict[str, MemoryProviderConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendProviderConfig:
    backend_kind: str = "opensandbox"
    domain: str | None = None
    api_key: str | None = field(default=None, repr=False)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendConfig:
    default_provider: str | None = None
    providers: dict[str, BackendProviderConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class RathConfig:
    """The whole file."""

    version: int = 1
    llm: LLMConfig = field(default_factory=LLMConfig)
    mcp: MCPConfig = field(default_factory=MCPConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)


def _parse(raw: dict[str, Any]) -> RathConfig:
    llm = _section(raw.get("llm"), "llm")
    providers = _section(llm.get("providers"), "llm.providers")
    mcp = _section(raw.get("mcp"), "mcp")
    servers: dict[str, MCPServerConfig] = {}
    for name, entry in _section(mcp.get("servers"), "mcp.servers").items():
        data = _section(entry, f"mcp.servers.{name}")
        command = data.get("command")
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise ConfigError(f"mcp.servers.{name}.command must be a list of strings")
        env = _section(data.get("env"), f"mcp.servers.{name}.env")
        servers[name] = MCPServerConfig(
            command=list(command), env={k: str(v) for k, v in env.items()}
        )
    memory = _section(raw.get("memory"), "memory")
    backend = _section(raw.get("backend"), "backend")
    version = raw.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError("version must be an integer")
    return RathConfig(
        version=version,
        llm=LLMConfig(
            default_provider=_optional_str(llm, "default_provider", "llm"),
            embedding_provider=_optional_str(llm, "embedding_provider", "llm"),
            vlm_provider=_optional_str(llm, "vlm_provider", "llm"),
            providers={
                name: LLMProviderConfig.parse(entry, f"llm.providers.{name}")
                for name, entry in providers.items()
            },
        ),
        mcp=MCPConfig(
            default_enabled=[str(n) for n in mcp.get("default_enabled") or []], servers=servers
        ),
        memory=MemoryConfig(
            default_provider=_optional_str(memory, "default_provider", "memory"),
            providers={
                name: MemoryProviderConfig(
                    backend_kind=str(_section(e, name).get("backend_kind", "local")),
                    path=_optional_str(_section(e, name), "path", f"memory.providers.{name}"),
                    embedding_provider=_optional_str(_section(e, name), "embedding_provider", name),
                    chat_provider=_optional_str(_section(e, name), "chat_provider", name),
                )
                for name, e in _section(memory.get("providers"), "memory.providers").items()
            },
        ),
        backend=BackendConfig(
            default_provider=_optional_str(backend, "default_provider", "backend"),
            providers={
                name: BackendProviderConfig(
                    backend_kind=str(_section(e, name).get("backend_kind", "opensandbox")),
                    domain=_optional_str(_section(e, name), "domain", f"backend.providers.{name}"),
                    api_key=_optional_str(
                        _section(e, name), "api_key", f"backend.providers.{name}"
                    ),
                    options=_section(_section(e, name).get("options"), name),
                )
                for name, e in _section(backend.get("providers"), "backend.providers").items()
            },
        ),
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _merge_credentials(raw: dict[str, Any], credentials: dict[str, Any]) -> None:
    """Fill ``api_key`` of ``llm`` / ``backend`` providers from ``credentials.json`` where the
    config leaves it out (an inline key wins)."""
    for section in ("llm", "backend"):
        keys = (credentials.get(section) or {}).get("providers") or {}
        if not isinstance(keys, dict):
            continue
        providers = ((raw.get(section) or {}).get("providers")) or {}
        if not isinstance(providers, dict):
            continue
        for name, key in keys.items():
            entry = providers.get(name)
            if isinstance(entry, dict) and not entry.get("api_key") and isinstance(key, str):
                entry["api_key"] = key


class ConfigStore:
    """The parsed file. ``ConfigStore.load()`` re-reads only when the file changed."""

    _cache: ClassVar[dict[Path, tuple[tuple[int, int] | None, ConfigStore]]] = {}
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path | None = None) -> None:
        self.path = (path or resolve_config_path()).expanduser()
        raw: dict[str, Any] = {}
        if self.path.is_file():
            raw = _read_json(self.path)
            credentials = self.path.with_name(CREDENTIALS_FILENAME)
            if credentials.is_file():
                _merge_credentials(raw, _read_json(credentials))
        self._config = _parse(raw)

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    @classmethod
    def load(cls) -> ConfigStore:
        path = resolve_config_path()
        stamp = cls._stamp(path)
        with cls._cache_lock:
            cached = cls._cache.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        store = cls(path)
        with cls._cache_lock:
            cls._cache[path] = (stamp, store)
        return store

    @property
    def config(self) -> RathConfig:
        return self._config

    def get_llm_provider(self, name: str | None = None) -> LLMProviderConfig:
        """The named ``llm.providers`` entry (the default one without a name)."""
        chosen = name or self._config.llm.default_provider
        if not chosen:
            raise KeyError(f"{self.path}: no llm.default_provider set and no name given")
        try:
            return self._config.llm.providers[chosen]
        except KeyError:
            raise KeyError(f"{self.path}: no llm.providers entry {chosen!r}") from None

    def find_provider_by_kind(self, kind: str) -> LLMProviderConfig | None:
        default = self._config.llm.default_provider
        entries = self._config.llm.providers
        if default in entries and entries[default].provider_kind == kind:
            return entries[default]
        return next((e for e in entries.values() if e.provider_kind == kind), None)

    def get_mcp_server(self, name: str) -> MCPServerConfig:
        try:
            return self._config.mcp.servers[name]
        except KeyError:
            raise KeyError(f"{self.path}: no mcp.servers entry {name!r}") from None

    def enabled_mcp_servers(self) -> list[MCPServerConfig]:
        return [self.get_mcp_server(n) for n in self._config.mcp.default_enabled]

    def save(self) -> None:
        from openrath_project.compat import OpenRathNameUnsupported

        raise OpenRathNameUnsupported(
            "openrath_project.config.store",
            "ConfigStore.save",
            "keys given to this process stay in its memory and are never written to disk",
            "edit config.json (and credentials.json, mode 0600) yourself",
        )


def default_store() -> ConfigStore:
    return ConfigStore.load()
