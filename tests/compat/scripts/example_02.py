"""Example 02 of OpenRath with the imports changed (it needs no model)."""

from pathlib import Path

from openrath_project.session import Session
from openrath_project.session.graph import (
    ancestors_bfs,
    edge_pairs,
    export_journal_jsonl,
    lineage_journal_tracking,
)
from openrath_project.session.manager import session_registry

root = Session.from_user_message("Plan a small project.")
forked = root.fork()
detached = root.detach()
print(f"root.id          = {root.id}")
print(f"forked.parents   = {forked.parent_session_ids}  kind={forked.lineage_kind.name}")
print(f"detached.parents = {detached.parent_session_ids}  kind={detached.lineage_kind.name}")

reg = session_registry()
with lineage_journal_tracking() as journal:
    root = Session.from_user_message("Initial user message.")
    reg.register(root)
    plan = root.fork()
    reg.register(plan)
    critique = root.fork()
    reg.register(critique)
    reg.register(plan.detach())
    leaf = critique.fork()
    reg.register(leaf)

by_id = {s.id: s for s in (root, plan, critique, leaf)}
print("\nedges (parent -> child):")
for parent, child in edge_pairs(by_id):
    print(f"  {parent} -> {child}")
print(f"\nancestors of leaf (nearest first): {ancestors_bfs(by_id, leaf.id)}")
out_path = Path("lineage_demo.jsonl")
export_journal_jsonl(journal, out_path)
print(f"\nwrote {len(journal.visit_order)} session rows to {out_path.resolve()}")
