"""7. Compression: a long session summarized into a new one that remembers what it replaced."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    session = flow.Session.create(
        [
            {"role": "system", "content": "You are concise."},
            {"role": "user", "content": "Tell me about our launch."},
        ]
        + [
            {"role": "assistant", "content": f"Detail {i}: " + "lorem ipsum " * 20}
            for i in range(8)
        ],
        project=example_project(),
        title="long launch thread",
    )
    compressor = flow.Compressor(provider([{"text": "Launch: 8 details, all on track."}]))
    summary = compressor(session)
    print(summary.op, [c.text for c in summary.chunks])
    return {
        "op": summary.op,
        "texts": [c.text for c in summary.chunks],
        "replaces": summary.metadata["replaces"],
        "edges": summary.lineage("ancestors").edge_tuples(),
    }


if __name__ == "__main__":
    main()
