"""The summarizer the API uses for ``summary`` merges (a flow.Compressor on the configured
provider). Returns ``None`` when no summary provider is configured: the merge is then a 400.

``OPENRATH_SUMMARY_PROVIDER`` (a Django setting, else the environment variable) names the
provider as ``kind`` or ``kind:argument``: ``openai`` (model from ``OPENAI_DEFAULT_MODEL`` or
the provider config file), ``openai:gpt-4.1-mini`` (that model), ``scripted:/path/fixture.json``
(the scripted provider playing that fixture). For other registered kinds the argument is the
model. A provider is built per merge, so a scripted fixture starts from its first turn each time.
"""

from __future__ import annotations

import os

from django.conf import settings

from sessions_app.providers import Provider, make_provider
from sessions_app.services import Summarizer

SETTING = "OPENRATH_SUMMARY_PROVIDER"


def summary_provider_spec() -> str:
    """The configured ``kind[:argument]``, or ``""``."""
    configured = getattr(settings, SETTING, None)
    if configured is None:
        configured = os.environ.get(SETTING, "")
    return str(configured).strip()


def provider_from_spec(spec: str) -> Provider:
    """Build the provider a ``kind[:argument]`` spec names (see the module docstring)."""
    kind, _, argument = spec.partition(":")
    kind, argument = kind.strip(), argument.strip()
    if kind == "scripted":
        if not argument:
            raise ValueError(
                f"{SETTING}={spec!r}: the scripted provider needs a fixture: 'scripted:<path>'"
            )
        return make_provider("scripted", fixture=argument)
    if argument:
        return make_provider(kind, model=argument)
    return make_provider(kind)


def default_summarizer() -> Summarizer | None:
    spec = summary_provider_spec()
    if not spec:
        return None
    # Imported here: the compressor pulls in the agents and the value layer, which only a
    # configured summary merge needs.
    from sessions_app.compressor import Compressor

    return Compressor(provider_from_spec(spec)).summarizer
