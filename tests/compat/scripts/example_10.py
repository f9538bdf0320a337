"""OpenRath's example 10 (same agent, another provider), imports changed, scripted model.

Without ``ANTHROPIC_API_KEY`` the anthropic path is skipped the way the original skips it; an
``anthropic`` provider is still built (no key needed until a call). The same agent code then runs
on the scripted provider.
"""

import os
import sys

from openrath_project import flow
from openrath_project.llm import Provider
from openrath_project.session import Session

claude = Provider(provider_kind="anthropic", model="claude-opus-4-7", max_tokens=256)
print("anthropic provider:", claude.provider_kind, str(claude))
if not os.environ.get("ANTHROPIC_API_KEY", "").strip():
    print("ANTHROPIC_API_KEY is not set; cannot run the anthropic variant.")
provider = Provider("scripted", fixture=[{"text": "OpenRath runs agents over sessions."}])
print(f"=== provider_kind={provider.provider_kind or 'openai'} model={provider} ===")
agent = flow.Agent(
    "Be brief.", provider, on_event=lambda d: sys.stdout.write(d.content_delta or "")
)
agent(Session.from_user_message("What is OpenRath?").to("local"))
print()
