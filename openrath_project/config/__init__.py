"""OpenRath's ``rath.config``: the ``config.json`` reader (see :mod:`.store`). Pure Python."""

from __future__ import annotations

from openrath_project.config.store import (
    CONFIG_FILENAME,
    OPENRATH_HOME_ENV,
    ConfigError,
    ConfigStore,
    LLMConfig,
    LLMProviderConfig,
    MCPConfig,
    MCPServerConfig,
    MemoryConfig,
    MemoryProviderConfig,
    RathConfig,
    default_store,
    resolve_config_path,
)

__all__ = [
    "CONFIG_FILENAME",
    "OPENRATH_HOME_ENV",
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
