"""2. Session lineage: fork (copy-on-write), append, merge, detach, and the lineage graph."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    root = flow.Session.from_user_message("Which database?", project=example_project())
    pro = root.fork(title="the case for Postgres")
    pro.append("Postgres: concurrency, SQL, extensions.", role="assistant")
    con = root.fork(title="the case for SQLite")
    con.append("SQLite: one file, zero operations.", role="assistant")
    both = flow.Session.merge(pro, con, title="both cases")
    archived = both.detach(title="handed off")
    graph = root.lineage()
    for parent, child, op in graph.edge_tuples():
        print(f"{parent[:8]} -{op}-> {child[:8]}")
    print([c.text for c in both.chunks])
    return {
        "merged": [c.text for c in both.chunks],
        "branches": sorted(c.branch[:8] for c in both.chunks if c.branch),
        "ops": sorted(op for _, _, op in graph.edge_tuples()),
        "nodes": len(graph.nodes),
        "detached_parents": archived.lineage("ancestors").nodes.__len__(),
    }


if __name__ == "__main__":
    main()
