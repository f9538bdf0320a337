"""OpenRath's ``rath.flow.agent_param``: ``AgentParam`` and ``Provider`` under their old path."""

from __future__ import annotations

from sessions_app.providers import ProviderFactory as Provider
from sessions_app.workflow import AgentParam

__all__ = ["AgentParam", "Provider"]
