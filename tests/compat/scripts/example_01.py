"""Example 01 of OpenRath with the imports changed and the scripted provider."""

import sys

from openrath_project import flow
from openrath_project.session import Session


def on_event(delta):
    if delta.content_delta:
        sys.stdout.write(delta.content_delta)
        sys.stdout.flush()


agent = flow.Agent(
    "You are a concise assistant.",
    flow.Provider("scripted", fixture=[{"text": "OpenRath is a torch-like agent framework."}]),
    on_event=on_event,
)
user = Session.from_user_message("In one sentence, what is OpenRath?").to("local")
out = agent(user)
print()
if out.cumulative_usage is not None:
    print(f"--- tokens: total={out.cumulative_usage.total_tokens}")
