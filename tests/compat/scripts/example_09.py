"""OpenRath's example 09 (an agent's memory), imports changed; no model needed.

``Agent(model=..., memory="local")`` used as a context manager: two notes remembered, one recall
that only the first note matches; after the block the agent's memory is unbound.
"""

from openrath_project import flow

with flow.Agent("You are a concise assistant.", model="demo", memory="local") as agent:
    agent.remember_memory("The user prefers a dark colour theme at night.")
    agent.remember_memory("The user reads English and writes Python.")
    found = agent.recall_memory("which theme at night", top_k=3)
    print("hits:", len(found.hits))
    for hit in found.hits:
        print(" ", hit.uri.startswith("memory://user/memories/preferences/"), hit.score > 0)
        print(" ", hit.snippet)
try:
    agent.recall_memory("theme")
except RuntimeError:
    print("after the block: memory unbound")
