"""Sessions benchmark on PostgreSQL: fork cost, page reads at depth, append throughput.

    python benchmarks/sessions.py            # full run, rewrites its RESULTS.md section
    python benchmarks/sessions.py --quick    # small sizes, prints only

Targets (issue 3): fork rows written constant and median time ratio 100k/1k <= 1.5; a
100-chunk page at depth 50 vs depth 1 (10k chunks): ratio <= 2.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    fresh_postgres,
    median_ms,
    p99_ms,
    setup_django,
    timed,
    write_section,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    args = parser.parse_args()
    setup_django(fresh_postgres("openrath_bench_sessions", args.server))

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from openrath_project.tenancy.services import project_create, tenant_create
    from sessions_app import selectors, services
    from sessions_app.chunk_rules import make_draft
    from sessions_app.models import Chunk, LineageEdge, Session

    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="bench")
    payload = "x" * 180  # ~200-byte chunk content

    def drafts(n: int, tag: str = "c") -> list:
        return [make_draft(role="user", content={"text": f"{tag}{i} {payload}"}) for i in range(n)]

    def grow(session: Session, n: int) -> None:
        for start in range(0, n, 1000):
            services.chunks_append(session=session, drafts=drafts(min(1000, n - start)))

    def counts() -> tuple[int, int, int]:
        return Session.objects.count(), LineageEdge.objects.count(), Chunk.objects.count()

    lines = []
    # --- fork cost ----------------------------------------------------------------------
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    repeat = 10 if args.quick else 40
    fork_rows = {}
    roots = {}
    for size in sizes:
        root = services.session_create(project=project, title=f"root-{size}")
        grow(root, size)
        roots[size] = root
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    for size in sizes:
        before = counts()
        services.session_fork(session=roots[size])
        after = counts()
        fork_rows[size] = tuple(a - b for a, b in zip(after, before, strict=True))
    # Interleaved, so background noise (autovacuum, checkpoints) hits every size alike.
    fork_samples: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(repeat):
        for size in sizes:
            fork_samples[size] += timed(
                lambda root=roots[size]: services.session_fork(session=root), 1
            )
    fork_ms = {size: (median_ms(v), p99_ms(v)) for size, v in fork_samples.items()}
    lines.append("### Fork cost (copy-on-write)\n")
    lines.append(
        "| chunks in parent | rows written (sessions, edges, chunks) | median ms | p99 ms |"
    )
    lines.append("|---:|---|---:|---:|")
    for size in sizes:
        lines.append(
            f"| {size:,} | {fork_rows[size]} | {fork_ms[size][0]:.2f} | {fork_ms[size][1]:.2f} |"
        )
    ratio = fork_ms[sizes[-1]][0] / fork_ms[sizes[0]][0]
    lines.append(f"\nMedian ratio {sizes[-1]:,}/{sizes[0]:,}: **{ratio:.2f}** (target <= 1.5).\n")

    # --- page reads at depth --------------------------------------------------------------
    total = 10_000
    depths = [1, 10, 50]
    per_level = 20
    page_ms = {}
    page_queries = {}
    for depth in depths:
        root = services.session_create(project=project, title=f"deep-{depth}")
        grow(root, total - depth * per_level)
        current = root
        for _ in range(depth):
            current = services.session_fork(session=current)
            services.chunks_append(session=current, drafts=drafts(per_level, "d"))
        assert current.length == total
        with CaptureQueriesContext(connection) as queries:
            page = selectors.chunk_page(current.id, after=total - 101, limit=100)
        assert len(page) == 100
        page_queries[depth] = len(queries)
        samples = []
        for after in (total // 2, total - 101, 0) * (10 if args.quick else 40):
            started = time.perf_counter()
            got = selectors.chunk_page(current.id, after=after, limit=100)
            samples.append(time.perf_counter() - started)
            assert len(got) == min(100, total - after - 1)
        page_ms[depth] = (median_ms(samples), p99_ms(samples))
    lines.append("### Reading a 100-chunk page (10,000 chunks in the logical list)\n")
    lines.append("| fork depth | SQL round trips | median ms | p99 ms |")
    lines.append("|---:|---:|---:|---:|")
    for depth in depths:
        lines.append(
            f"| {depth} | {page_queries[depth]} | {page_ms[depth][0]:.2f} | "
            f"{page_ms[depth][1]:.2f} |"
        )
    ratio = page_ms[50][0] / page_ms[1][0]
    lines.append(f"\nMedian ratio depth-50/depth-1: **{ratio:.2f}** (target <= 2).\n")

    # --- append throughput ------------------------------------------------------------------
    appends = 500 if args.quick else 2000

    def single(session: Session, n: int) -> None:
        for i in range(n):
            services.chunks_append(session=session, drafts=drafts(1, f"s{i}-"))

    target = services.session_create(project=project, title="append-1")
    started = time.perf_counter()
    single(target, appends)
    single_rate = appends / (time.perf_counter() - started)

    def concurrent(shared: bool) -> float:
        sessions = [services.session_create(project=project, title="append-4")]
        if not shared:
            sessions += [
                services.session_create(project=project, title="append-4") for _ in range(3)
            ]
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            try:
                row = Session.objects.get(id=sessions[0 if shared else index].id)
                single(row, appends // 4)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        begin = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        for session in sessions:
            seqs = list(
                Chunk.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
            )
            assert seqs == list(range(len(seqs)))
        return (appends // 4) * 4 / (time.perf_counter() - begin)

    shared_rate = concurrent(shared=True)
    separate_rate = concurrent(shared=False)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE sessions_app_chunk")
        cursor.execute(
            "SELECT pg_total_relation_size('sessions_app_chunk'), "
            "pg_relation_size('sessions_app_chunk')"
        )
        total_bytes, heap_bytes = cursor.fetchone()
    chunk_count = Chunk.objects.count()
    lines.append("### Append throughput (one chunk per transaction)\n")
    lines.append("| writers | chunks/s |")
    lines.append("|---|---:|")
    lines.append(f"| 1 | {single_rate:,.0f} |")
    lines.append(f"| 4 threads, one session (row lock orders them) | {shared_rate:,.0f} |")
    lines.append(f"| 4 threads, four sessions | {separate_rate:,.0f} |")
    lines.append(
        f"\nBytes stored per chunk (~200-byte content, {chunk_count:,} chunks): "
        f"{total_bytes / chunk_count:,.0f} with indexes, {heap_bytes / chunk_count:,.0f} heap.\n"
    )
    body = "\n".join(lines)
    print(body)
    if not args.quick:
        write_section("sessions", "Sessions (PostgreSQL)", body, "python benchmarks/sessions.py")


if __name__ == "__main__":
    main()
