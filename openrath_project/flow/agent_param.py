"""OpenRath's ``rath.flow.agent_param``: ``AgentParam`` and ``Provider`` under their old path."""

from __future__ import annotations

from runs_app.workflow import AgentParam
from sessions_app.providers import ProviderFactory as Provider

__all__ = ["AgentParam", "Provider"]
