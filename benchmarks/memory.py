"""Memory benchmark on PostgreSQL: the measurement behind the recall design (docs/memory.md).

    python benchmarks/memory.py            # 10k and 100k entries, rewrites its RESULTS.md section
    python benchmarks/memory.py --quick    # 2k and 10k entries, prints only

Measured, on one project holding N entries (the 30 hand-labelled facts of
``tests/memory_app/fixtures/recall_set.json`` hidden among synthetic ones whose words follow a
Zipf law over a vocabulary that includes every labelled word; 30% of them also carry 1-3 words
of the labelled facts, so distractors compete for the queries' terms):

* recall latency (median, p99) of every candidate ranking design, over the 12 labelled queries
  and 100 synthetic 2-4 word queries:
  - ``postings + BM25 summed in SQL`` (what ``memory_app.selectors.recall`` does),
  - ``postings + BM25 summed in Python`` (the same postings sent to ``bm25.score_postings``),
  - ``PostgreSQL FTS prefilter + BM25 in Python`` (GIN index on ``to_tsvector``, rescored),
  - ``PostgreSQL ts_rank_cd`` (the built-in ranking; not BM25: for recall@5 only),
  - ``bm25s`` and ``rank-bm25`` (libraries; index built from the fetched corpus per query,
    and query time on a warm in-process index), when installed;
* recall@5 and precision@1 on the labelled queries for each design;
* remember throughput (``memory_remember``: one entry per transaction);
* storage per entry.

Seeding uses ``bulk_create`` with the rows ``memory_remember`` would write (same fingerprint and
index terms), because 110k single-row transactions would only measure the seeding.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    fresh_postgres,
    median_ms,
    p99_ms,
    setup_django,
    timed,
    write_section,
)

LABELLED = REPO / "tests" / "memory_app" / "fixtures" / "recall_set.json"
K = 5
SEED = 20261129


def synthetic_vocabulary(rng: random.Random, labelled_words: list[str], size: int) -> list[str]:
    """Pseudo-words, with the labelled set's words spread over the Zipf ranks 30..3000."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    vocabulary = sorted(words - set(labelled_words))
    rng.shuffle(vocabulary)
    for word in labelled_words:
        vocabulary.insert(rng.randint(30, 3000), word)
    return vocabulary[:size]


def main() -> None:  # noqa: C901 - a linear script
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    args = parser.parse_args()
    setup_django(fresh_postgres("openrath_bench_memory", args.server))

    from django.db import connection, transaction
    from django.db.models import Count, Sum

    from memory_app import bm25, facts, selectors, services
    from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm
    from openrath_project.tenancy.services import project_create, tenant_create

    try:
        import bm25s
    except ImportError:
        bm25s = None
    try:
        import rank_bm25
    except ImportError:
        rank_bm25 = None

    import logging

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    rng = random.Random(SEED)
    labelled = json.loads(LABELLED.read_text())
    label_texts = {e["key"]: e["text"] for e in labelled["entries"]}
    labelled_words = sorted({t for text in label_texts.values() for t in bm25.tokenize(text)})
    vocabulary = synthetic_vocabulary(rng, labelled_words, 20_000)
    # Zipf over content words: ranks start at 50, as if the ~50 most frequent words of a
    # language (the stop words the tokenizer drops) were already removed.
    weights = [1.0 / (rank + 50) ** 1.07 for rank in range(len(vocabulary))]
    cumulative: list[float] = []
    total = 0.0
    for w in weights:
        total += w
        cumulative.append(total)

    def sentence() -> str:
        words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(8, 25))
        if rng.random() < 0.3:  # hard distractors: they share words with the labelled facts
            words += rng.sample(labelled_words, rng.randint(1, 3))
            rng.shuffle(words)
        return " ".join(words).capitalize() + "."

    tenant = tenant_create(slug="bench")
    sizes = [2_000, 10_000] if args.quick else [10_000, 100_000]
    projects = {size: project_create(tenant=tenant, slug=f"p{size}") for size in sizes}
    # Another tenant's memory with the same words: it must never be read, nor slow a recall.
    neighbour = project_create(tenant=tenant_create(slug="neighbour"), slug="p")
    keys_by_size: dict[int, dict[uuid.UUID, str]] = {}

    def seed(project: Any, texts: list[tuple[str | None, str]]) -> dict[uuid.UUID, str]:
        labelled_ids: dict[uuid.UUID, str] = {}
        unique = {facts.fingerprint(text): (key, text) for key, text in texts}
        texts = list(unique.values())
        for start in range(0, len(texts), 5000):
            entries, terms = [], []
            for key, text in texts[start : start + 5000]:
                frequencies, count = bm25.term_frequencies(text)
                entry = MemoryEntry(
                    tenant_id=project.tenant_id,
                    project=project,
                    text=text,
                    fingerprint=facts.fingerprint(text),
                    term_count=count,
                    trust="trusted",
                    created_by="bench",
                )
                entries.append(entry)
                if key:
                    labelled_ids[entry.id] = key
                terms += [
                    MemoryTerm(
                        entry=entry, project_id=project.id, term=t, place="p", tf=tf, length=count
                    )
                    for t, tf in frequencies.items()
                ]
            with transaction.atomic():
                MemoryEntry.objects.bulk_create(entries)
                MemoryTerm.objects.bulk_create(terms, batch_size=5000)
        totals = MemoryEntry.objects.filter(project=project).aggregate(
            n=Count("id"), t=Sum("term_count")
        )
        MemoryStats.objects.update_or_create(
            project=project, place="p", defaults={"entries": totals["n"], "terms": totals["t"]}
        )
        return labelled_ids

    started = time.perf_counter()
    for size in sizes:
        texts: list[tuple[str | None, str]] = [(None, sentence()) for _ in range(size - 30)]
        for key, text in label_texts.items():
            texts.insert(rng.randint(0, len(texts)), (key, text))
        keys_by_size[size] = seed(projects[size], texts)
    seed(neighbour, [(None, sentence()) for _ in range(sizes[-1] // 10)])
    E, T = MemoryEntry._meta.db_table, MemoryTerm._meta.db_table
    with connection.cursor() as cursor:
        # Only for the FTS candidates: the product ships no such index.
        cursor.execute(f"CREATE INDEX bench_fts ON {E} USING gin (to_tsvector('simple', text))")
        cursor.execute("VACUUM ANALYZE")
    seed_seconds = time.perf_counter() - started
    print(f"seeded {sum(sizes) + sizes[-1] // 10} entries in {seed_seconds:.0f}s", flush=True)

    queries = [q["query"] for q in labelled["queries"]]
    synthetic_queries = [
        " ".join(rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(2, 4)))
        for _ in range(100)
    ]
    all_queries = queries + synthetic_queries

    # --- candidate designs: each returns the top-K entry ids --------------------------------
    def fetch(ids: list[uuid.UUID]) -> list[uuid.UUID]:
        rows = MemoryEntry.objects.in_bulk(ids)
        return [i for i in ids if i in rows]

    def product(project: Any, query: str) -> list[uuid.UUID]:
        return [hit.id for hit in services.memory_recall(project=project, query=query, k=K)]

    def python_bm25(project: Any, query: str) -> list[uuid.UUID]:
        """The postings travel to Python, which sums BM25 (``bm25.score_postings``)."""
        terms = bm25.query_terms(query)
        if not terms:
            return []
        rows = MemoryTerm.objects.filter(
            project=project, term__in=terms, place__in=["p"]
        ).values_list("entry_id", "term", "tf", "length")
        postings = [bm25.Posting(key=e, term=t, tf=tf, length=n) for e, t, tf, n in rows]
        if not postings:
            return []
        stats = selectors.corpus_stats(project_id=project.id, places=["p"])
        return fetch([i for i, _ in bm25.top_k(bm25.score_postings(postings, stats), K)])

    def fts_candidates(project: Any, terms: list[str]) -> list[tuple[uuid.UUID, str]]:
        tsquery = " | ".join(f"{t}:*" for t in terms)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, text FROM {E} WHERE project_id = %s AND scope = 'project' "
                "AND to_tsvector('simple', text) @@ to_tsquery('simple', %s)",
                [project.id, tsquery],
            )
            return cursor.fetchall()

    def fts_bm25(project: Any, query: str) -> list[uuid.UUID]:
        terms = bm25.query_terms(query)
        if not terms:
            return []
        wanted = set(terms)
        postings = []
        for entry_id, text in fts_candidates(project, terms):
            frequencies, length = bm25.term_frequencies(text)
            postings += [
                bm25.Posting(key=entry_id, term=t, tf=tf, length=length)
                for t, tf in frequencies.items()
                if t in wanted
            ]
        stats = selectors.corpus_stats(project_id=project.id, places=["p"])
        return fetch([i for i, _ in bm25.top_k(bm25.score_postings(postings, stats), K)])

    def ts_rank_cd(project: Any, query: str) -> list[uuid.UUID]:
        terms = bm25.query_terms(query)
        if not terms:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {E} WHERE project_id = %s AND scope = 'project' "
                "AND to_tsvector('simple', text) @@ to_tsquery('simple', %s) "
                "ORDER BY ts_rank_cd(to_tsvector('simple', text), to_tsquery('simple', %s)) DESC, "
                "id DESC LIMIT %s",
                [project.id, *[" | ".join(f"{t}:*" for t in terms)] * 2, K],
            )
            return fetch([row[0] for row in cursor.fetchall()])

    def corpus(project: Any) -> tuple[list[uuid.UUID], list[list[str]]]:
        rows = list(
            MemoryEntry.objects.filter(project=project, scope="project").values_list("id", "text")
        )
        return [r[0] for r in rows], [bm25.tokenize(r[1]) for r in rows]

    warm: dict[tuple[str, int], Any] = {}

    def bm25s_build(project: Any) -> tuple[list[uuid.UUID], Any]:
        ids, tokens = corpus(project)
        index = bm25s.BM25(k1=bm25.K1, b=bm25.B, method="lucene")
        index.index(tokens, show_progress=False)
        return ids, index

    def bm25s_query(built: tuple[list[uuid.UUID], Any], query: str) -> list[uuid.UUID]:
        ids, index = built
        terms = [t for t in bm25.query_terms(query) if t in index.vocab_dict]
        if not terms:
            return []
        docs, scores = index.retrieve([terms], k=K, show_progress=False, n_threads=0)
        return fetch([ids[d] for d, s in zip(docs[0], scores[0], strict=True) if s > 0])

    def rank_build(project: Any) -> tuple[list[uuid.UUID], Any]:
        ids, tokens = corpus(project)
        return ids, rank_bm25.BM25Okapi(tokens, k1=bm25.K1, b=bm25.B)

    def rank_query(built: tuple[list[uuid.UUID], Any], query: str) -> list[uuid.UUID]:
        ids, index = built
        scores = index.get_scores(bm25.query_terms(query))
        order = sorted(range(len(ids)), key=lambda i: -scores[i])[:K]
        return fetch([ids[i] for i in order if scores[i] > 0])

    designs: dict[str, Callable[[Any, str], list[uuid.UUID]]] = {
        "postings + BM25 summed in SQL (chosen)": product,
        "postings + BM25 summed in Python": python_bm25,
        "PostgreSQL FTS prefilter + BM25 in Python": fts_bm25,
        "PostgreSQL ts_rank_cd (not BM25)": ts_rank_cd,
    }
    if bm25s is not None:
        designs["bm25s, index built per query"] = lambda p, q: bm25s_query(bm25s_build(p), q)
        designs["bm25s, warm in-process index"] = lambda p, q: bm25s_query(warm[("bm25s", p.id)], q)
    if rank_bm25 is not None:
        designs["rank-bm25, index built per query"] = lambda p, q: rank_query(rank_build(p), q)
        designs["rank-bm25, warm in-process index"] = lambda p, q: rank_query(
            warm[("rank", p.id)], q
        )

    def quality(design: Callable[[Any, str], list[uuid.UUID]], size: int) -> tuple[float, float]:
        """(recall@5, precision@1) over the labelled queries."""
        keys = keys_by_size[size]
        recalls, firsts = [], []
        for item in labelled["queries"]:
            found = [keys.get(i) for i in design(projects[size], item["query"])]
            relevant = set(item["relevant"])
            recalls.append(len(set(found) & relevant) / min(len(relevant), K))
            firsts.append(1.0 if found and found[0] in relevant else 0.0)
        return statistics.mean(recalls), statistics.mean(firsts)

    latency: dict[str, dict[int, tuple[float, float, int]]] = {name: {} for name in designs}
    recall5: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in designs}
    build_ms: dict[str, dict[int, float]] = {"bm25s": {}, "rank-bm25": {}}
    for size in sizes:
        project = projects[size]
        if bm25s is not None:
            build_ms["bm25s"][size] = median_ms(
                timed(lambda project=project: bm25s_build(project), 3)
            )
            warm[("bm25s", project.id)] = bm25s_build(project)
        if rank_bm25 is not None:
            build_ms["rank-bm25"][size] = median_ms(
                timed(lambda project=project: rank_build(project), 1)
            )
            warm[("rank", project.id)] = rank_build(project)
        for name, design in designs.items():
            slow = "built per query" in name
            batch = all_queries[:12] if slow else all_queries
            rounds = 1 if slow else 3
            samples: list[float] = []
            for _ in range(rounds):
                for query in batch:
                    samples += timed(lambda d=design, p=project, q=query: d(p, q), 1)
            latency[name][size] = (median_ms(samples), p99_ms(samples), len(samples))
            recall5[name][size] = quality(design, size)
            print(
                f"{size:>7} {name:<45} {latency[name][size][0]:9.2f} ms "
                f"p99 {latency[name][size][1]:9.2f}  recall@5 {recall5[name][size][0]:.3f} "
                f"p@1 {recall5[name][size][1]:.3f}",
                flush=True,
            )

    # The chosen design on the labelled set alone (30 entries), and its exact agreement.
    small = project_create(tenant=tenant, slug="labelled")
    small_keys = seed(small, list(label_texts.items()))
    alone = []
    for item in labelled["queries"]:
        found = {small_keys.get(i) for i in product(small, item["query"])}
        relevant = set(item["relevant"])
        alone.append(len(found & relevant) / min(len(relevant), K))
    recall_alone = statistics.mean(alone)

    # Isolation: recalls of the big project never return the neighbour's rows.
    neighbour_ids = set(MemoryEntry.objects.filter(project=neighbour).values_list("id", flat=True))
    leaked = sum(len(set(product(projects[sizes[-1]], q)) & neighbour_ids) for q in all_queries)

    # --- remember throughput ---------------------------------------------------------------
    target = project_create(tenant=tenant, slug="remember")
    n_remember = 500 if args.quick else 2000
    remember_texts = [sentence() for _ in range(n_remember)]

    def remember_all(texts: list[str]) -> None:
        for text in texts:
            services.memory_remember(project=target, text=text, trust="trusted")

    started = time.perf_counter()
    remember_all(remember_texts)
    single_rate = n_remember / (time.perf_counter() - started)
    started = time.perf_counter()
    remember_all(remember_texts[: n_remember // 4])
    duplicate_rate = (n_remember // 4) / (time.perf_counter() - started)
    threaded_texts = [sentence() for _ in range(n_remember)]
    threads = [
        threading.Thread(target=remember_all, args=(threaded_texts[i::4],)) for i in range(4)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    threaded_rate = n_remember / (time.perf_counter() - started)
    connection.close()

    # --- storage ----------------------------------------------------------------------------
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute(
            "SELECT pg_total_relation_size(%s), pg_total_relation_size(%s), "
            "pg_relation_size('bench_fts')",
            [E, T],
        )
        entry_bytes, term_bytes, fts_bytes = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {E}")
        (n_entries,) = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {T}")
        (n_terms,) = cursor.fetchone()
    entry_bytes -= fts_bytes

    # --- report ----------------------------------------------------------------------------
    head = " | ".join(f"{s:,} entries: median / p99 ms" for s in sizes)
    lines = [
        "### Recall latency and quality by design",
        "",
        f"One project of N entries; {len(all_queries)} queries (the 12 labelled + 100 synthetic "
        "2-4 word ones), 3 rounds; designs that build an index per query: the 12 labelled, once. "
        "Quality: the 12 labelled queries, the 30 labelled facts hidden among N-30 distractors "
        "(30% of which also contain 1-3 words of the labelled facts); recall@5 / precision@1.",
        "",
        f"| design | {head} | " + " | ".join(f"quality at {s:,}" for s in sizes) + " |",
        "|---|" + "---:|" * (2 * len(sizes)),
    ]
    for name in designs:
        cells = [f"{latency[name][s][0]:,.2f} / {latency[name][s][1]:,.2f}" for s in sizes]
        cells += [f"{recall5[name][s][0]:.3f} / {recall5[name][s][1]:.3f}" for s in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for lib, values in build_ms.items():
        if values:
            built = ", ".join(f"{v:,.0f} ms at {s:,}" for s, v in values.items())
            lines.append(f"{lib} index build (fetch + tokenise + index): {built}.  ")
    lines += [
        f"Chosen design, labelled set alone (30 entries): recall@5 **{recall_alone:.3f}**.  ",
        f"Neighbour tenant rows returned by {len(all_queries)} recalls of the largest project: "
        f"**{leaked}**.",
        "",
        "### Remember throughput (`memory_remember`, one entry per transaction, PostgreSQL)",
        "",
        "| writers | entries/s |",
        "|---|---:|",
        f"| 1 | {single_rate:,.0f} |",
        f"| 1, every text already stored (duplicate path) | {duplicate_rate:,.0f} |",
        f"| 4 threads | {threaded_rate:,.0f} |",
        "",
        "### Storage",
        "",
        f"{n_entries:,} entries, {n_terms:,} postings ({n_terms / n_entries:.1f} per entry). "
        f"Bytes per entry with indexes: entry row {entry_bytes / n_entries:,.0f}, postings "
        f"{term_bytes / n_entries:,.0f}; a GIN `to_tsvector` index (FTS designs) would be "
        f"{fts_bytes / n_entries:,.0f}.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.quick:
        write_section("memory", "Memory (PostgreSQL)", body, "python benchmarks/memory.py")


if __name__ == "__main__":
    main()
