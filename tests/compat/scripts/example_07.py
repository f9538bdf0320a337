"""OpenRath's example 07 (reading stream deltas), imports changed, scripted model.

The callback prints each content delta as it arrives and a marker for the final delta's
``finish_reason``; then the script prints the session's cumulative usage.
"""

import sys

from openrath_project import flow
from openrath_project.llm import RathLLMStreamDelta
from openrath_project.session import Session

seen: list[RathLLMStreamDelta] = []


def show(delta: RathLLMStreamDelta) -> None:
    seen.append(delta)
    if delta.content_delta:
        sys.stdout.write(delta.content_delta)
    if delta.finish_reason is not None:
        sys.stdout.write(f"\n[finish_reason={delta.finish_reason}]\n")


model = flow.Provider(
    "scripted",
    fixture=[
        {
            "text": "One, two, three.",
            "stream": ["One, ", "two, ", "three."],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
    ],
)
out = flow.Agent("Be brief.", model, on_event=show)(Session.from_user_message("Count to three."))
usage = out.cumulative_usage
print(
    f"usage total={usage.total_tokens} prompt={usage.prompt_tokens} "
    f"completion={usage.completion_tokens}"
)
print("deltas:", len(seen), "| with text:", sum(1 for d in seen if d.content_delta))
