"""OpenRath's example 08 (compressing a session), imports changed, scripted model.

An agent answers once (two rows: the question and the answer), then a Compressor built with
OpenRath's argument order (instruction first, provider second) replaces the transcript with one
summary row. The script prints the row counts and the summary.
"""

from openrath_project import flow
from openrath_project.session import Session

model = flow.Provider(
    "scripted",
    fixture=[
        {"text": "A sandbox is where an agent's tools run."},
        {"text": "Sandboxes run tools."},
    ],
)
session = flow.Agent("Answer at length.", model)(Session.from_user_message("What is a sandbox?"))
print("rows before:", len(session.chunk_table.rows))
compressor = flow.Compressor("Summarise the conversation in one message.", model)
short = compressor.forward(session)
print("rows after:", len(short.chunk_table.rows))
print("summary row:", short.chunk_table.rows[0].kind, short.chunk_table.rows[0].payload["content"])
print("lineage:", short.lineage_kind.name, short.parent_session_ids == (session.id,))
