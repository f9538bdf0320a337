"""OpenRath's ``config.json``: named model providers and MCP servers, read (never written).

Where the file is, first hit wins (as in OpenRath 2.0): the directory named by
``OPENRATH_HOME``; ``./.openrath/`` when it exists in the working directory; ``~/.openrath/``.
The schema is OpenRath's::

    {"version": 1,
     "llm": {"default_provider": "main",
             "providers": {"main": {"provider_kind": "openai", "model": "gpt-5.5",
                                    "api_key": "...", "base_url": "...",
                                    "temperature": 0.2, "max_tokens": 512}}},
     "mcp": {"default_enabled": ["files"],
             "servers": {"files": {"command": ["python", "-m", "server"], "env": {}}}}}

An ``api_key`` may also live in the sibling ``credentials.json``
(``{"llm": {"providers": {"main": "..."}}}``); a key written inline in ``config.json`` wins.
Unknown keys and sections are ignored, so a file written by a newer OpenRath still loads.

Keys read from these files stay in the provider's memory: they are never copied into a
session, a chunk, a log line or a ``repr``. Environment variables win over the file (see
``openai_provider.resolve_config``). Pure Python: no Django import.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_FILENAME",
    "CREDENTIALS_FILENAME",
    "HOME_ENV",
    "LLMEntry",
    "MCPServerEntry",
    "OpenRathConfig",
    "OpenRathConfigError",
    "config_dir",
    "load_openrath_config",
]

HOME_ENV = "OPENRATH_HOME"
CONFIG_FILENAME = "config.json"
CREDENTIALS_FILENAME = "credentials.json"
LOCAL_DIR_NAME = ".openrath"


class OpenRathConfigError(ValueError):
    """``config.json`` (or ``credentials.json``) exists but cannot be used."""


@dataclass(frozen=True)
class LLMEntry:
    """One entry of ``llm.providers``. ``repr`` never shows the key."""

    name: str
    provider_kind: str = "openai"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class MCPServerEntry:
    """One entry of ``mcp.servers``: the server's argv and extra environment."""

    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenRathConfig:
    """What this product uses of ``config.json``."""

    path: Path | None = None
    default_provider: str | None = None
    providers: dict[str, LLMEntry] = field(default_factory=dict)
    mcp_default_enabled: tuple[str, ...] = ()
    mcp_servers: dict[str, MCPServerEntry] = field(default_factory=dict)

    def llm_provider(self, name: str | None = None) -> LLMEntry:
        """The entry called ``name`` (default: ``llm.default_provider``); ``KeyError`` naming
        the entries there are otherwise."""
        target = name or self.default_provider
        where = self.path or "config.json"
        if target is None:
            raise KeyError(f"no provider name given and no llm.default_provider set in {where}")
        try:
            return self.providers[target]
        except KeyError:
            raise KeyError(
                f"LLM provider {target!r} not found in {where}; available: {sorted(self.providers)}"
            ) from None

    def provider_for_kind(self, kind: str) -> LLMEntry | None:
        """The default provider when it is of ``kind``, else the first entry of ``kind``."""
        if self.default_provider is not None:
            default = self.providers.get(self.default_provider)
            if default is not None and default.provider_kind == kind:
                return default
        return next((e for e in self.providers.values() if e.provider_kind == kind), None)

    def mcp_server(self, name: str) -> MCPServerEntry:
        """The MCP server called ``name``; ``KeyError`` naming the servers there otherwise."""
        try:
            return self.mcp_servers[name]
        except KeyError:
            raise KeyError(
                f"MCP server {name!r} not found in {self.path or 'config.json'}; "
                f"available: {sorted(self.mcp_servers)}"
            ) from None


def config_dir() -> Path:
    """The directory of ``config.json``: ``$OPENRATH_HOME``, ``./.openrath`` or ``~/.openrath``."""
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        return Path(home).expanduser()
    local = Path.cwd() / LOCAL_DIR_NAME
    if local.is_dir():
        return local
    return Path.home() / LOCAL_DIR_NAME


def _read_object(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OpenRathConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise OpenRathConfigError(f"{path} must hold a JSON object")
    return document


def _section(document: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = document.get(name, {})
    if not isinstance(value, dict):
        raise OpenRathConfigError(f"{path}: {name!r} must be a JSON object")
    return value


def _optional(entry: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise OpenRathConfigError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    return value


def _llm_entries(
    document: dict[str, Any], secrets: dict[str, str], path: Path
) -> dict[str, LLMEntry]:
    providers = _section(_section(document, "llm", path), "providers", path)
    entries: dict[str, LLMEntry] = {}
    for name, raw in providers.items():
        where = f"{path}: llm.providers.{name}"
        if not isinstance(raw, dict):
            raise OpenRathConfigError(f"{where} must be a JSON object")
        kind = raw.get("provider_kind") or "openai"
        if not isinstance(kind, str):
            raise OpenRathConfigError(f"{where}: 'provider_kind' must be a string")
        temperature = _optional(raw, "temperature", (int, float), where)
        entries[name] = LLMEntry(
            name=name,
            provider_kind=kind,
            model=_optional(raw, "model", str, where),
            api_key=_optional(raw, "api_key", str, where) or secrets.get(name),
            base_url=_optional(raw, "base_url", str, where),
            temperature=float(temperature) if temperature is not None else None,
            max_tokens=_optional(raw, "max_tokens", int, where),
        )
    return entries


def _mcp_entries(document: dict[str, Any], path: Path) -> dict[str, MCPServerEntry]:
    servers = _section(_section(document, "mcp", path), "servers", path)
    entries: dict[str, MCPServerEntry] = {}
    for name, raw in servers.items():
        where = f"{path}: mcp.servers.{name}"
        command = raw.get("command") if isinstance(raw, dict) else None
        if not (isinstance(command, list) and command and all(isinstance(p, str) for p in command)):
            raise OpenRathConfigError(f"{where}: 'command' must be a non-empty list of strings")
        env = raw.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise OpenRathConfigError(f"{where}: 'env' must map strings to strings")
        entries[name] = MCPServerEntry(name=name, command=tuple(command), env=dict(env))
    return entries


def _credentials(directory: Path) -> dict[str, str]:
    path = directory / CREDENTIALS_FILENAME
    if not path.is_file():
        return {}
    providers = _section(_section(_read_object(path), "llm", path), "providers", path)
    return {name: key for name, key in providers.items() if isinstance(key, str) and key}


def load_openrath_config(path: str | os.PathLike[str] | None = None) -> OpenRathConfig:
    """Read ``config.json`` (``path``, or the one :func:`config_dir` finds). A missing file
    is an empty configuration; a broken one is an :class:`OpenRathConfigError`."""
    file_path = Path(path).expanduser() if path is not None else config_dir() / CONFIG_FILENAME
    if not file_path.is_file():
        return OpenRathConfig()
    document = _read_object(file_path)
    llm = _section(document, "llm", file_path)
    default = llm.get("default_provider")
    if default is not None and not isinstance(default, str):
        raise OpenRathConfigError(f"{file_path}: llm.default_provider must be a string")
    mcp = _section(document, "mcp", file_path)
    enabled = mcp.get("default_enabled") or []
    if not isinstance(enabled, list) or not all(isinstance(n, str) for n in enabled):
        raise OpenRathConfigError(f"{file_path}: mcp.default_enabled must be a list of names")
    return OpenRathConfig(
        path=file_path,
        default_provider=default,
        providers=_llm_entries(document, _credentials(file_path.parent), file_path),
        mcp_default_enabled=tuple(enabled),
        mcp_servers=_mcp_entries(document, file_path),
    )
