"""BM25 ranking of memory entries: tokenisation and scoring. Pure Python.

The same :func:`tokenize` builds the stored postings (``MemoryTerm`` rows) and the query, so a
fact is found by the words it was stored with. Scoring is Okapi BM25 with the Lucene/ATIRE
inverse document frequency (always positive)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d, q) = sum over distinct t in q of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

``N``, ``avgdl`` and ``df`` are statistics of the corpus the recall searches (see
``memory_app.selectors``); ``k1 = 1.2`` and ``b = 0.75`` are the usual defaults.
No Django import: tested without a database (``tests/memory_app/test_bm25.py``).
"""

from __future__ import annotations

import heapq
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

#: An entry key: orderable, because ties are broken by key (time-ordered ids: newer first).
K = TypeVar("K", bound=Any)

K1 = 1.2
B = 0.75
#: Longest stored term; longer tokens are cut (a hash or a URL fragment is rarely a query word).
MAX_TERM_LENGTH = 40
#: Most distinct query terms used; the rest of a very long query is ignored (first ones win).
MAX_QUERY_TERMS = 64

#: Runs of letters and digits: underscores, punctuation and spaces separate tokens.
_TOKEN = re.compile(r"[^\W_]+")

#: Common English function words: they match nearly every entry and rank nothing.
STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905 - a block of words reads better than 130 quoted strings
)


def stem(token: str) -> str:
    """Harman's S-stemmer: folds English plurals (``deployments`` -> ``deployment``).

    Deliberately light: it never merges unrelated words, which aggressive stemmers do.
    """
    if len(token) > 3 and token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if len(token) > 2 and token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Index terms of a text, in order: NFKC case-folded words and numbers, stop words dropped,
    plurals folded, each at most :data:`MAX_TERM_LENGTH` characters."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [
        stem(token)[:MAX_TERM_LENGTH] for token in _TOKEN.findall(folded) if token not in STOPWORDS
    ]


def term_frequencies(text: str) -> tuple[dict[str, int], int]:
    """``({term: count}, number of terms)`` of a text: what one entry stores for ranking."""
    tokens = tokenize(text)
    return dict(Counter(tokens)), len(tokens)


def query_terms(query: str) -> list[str]:
    """Distinct terms of a query in first-seen order, at most :data:`MAX_QUERY_TERMS` (the
    rest of a long query is not even read)."""
    folded = unicodedata.normalize("NFKC", query).casefold()
    terms: dict[str, None] = {}
    for match in _TOKEN.finditer(folded):
        token = match.group()
        if token in STOPWORDS:
            continue
        terms[stem(token)[:MAX_TERM_LENGTH]] = None
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return list(terms)


@dataclass(frozen=True)
class CorpusStats:
    """The searched corpus: how many entries and how many terms they hold in total."""

    documents: int
    total_terms: int

    @property
    def avgdl(self) -> float:
        return self.total_terms / self.documents if self.documents else 0.0


@dataclass(frozen=True)
class Posting(Generic[K]):
    """One term of one entry: the entry key, the term, its count and the entry's length."""

    key: K
    term: str
    tf: int
    length: int


def idf(documents: int, df: int) -> float:
    """Lucene's BM25 idf: positive for any ``0 < df <= documents``."""
    return math.log(1.0 + (documents - df + 0.5) / (df + 0.5))


def term_score(
    *, tf: int, length: int, avgdl: float, idf_value: float, k1: float = K1, b: float = B
) -> float:
    """One term's contribution to an entry's score."""
    norm = 1.0 - b + b * (length / avgdl) if avgdl > 0 else 1.0
    return idf_value * tf * (k1 + 1.0) / (tf + k1 * norm)


def score_postings(
    postings: Iterable[Posting[K]],
    stats: CorpusStats,
    *,
    k1: float = K1,
    b: float = B,
) -> dict[K, float]:
    """BM25 scores of every entry that holds at least one query term.

    ``postings`` must be *all* postings of the query terms in the searched corpus: document
    frequencies are counted from them, so a partial list would distort the idf.
    """
    rows = list(postings)
    df = Counter(p.term for p in rows)
    idfs = {term: idf(stats.documents, count) for term, count in df.items()}
    avgdl = stats.avgdl
    # Summed in a fixed term order so equal inputs give bit-for-bit equal scores.
    rows.sort(key=lambda p: p.term)
    scores: dict[K, float] = {}
    for p in rows:
        scores[p.key] = scores.get(p.key, 0.0) + term_score(
            tf=p.tf, length=p.length, avgdl=avgdl, idf_value=idfs[p.term], k1=k1, b=b
        )
    return scores


def top_k(scores: Mapping[K, float], k: int) -> list[tuple[K, float]]:
    """The ``k`` best ``(key, score)`` pairs, best first; ties go to the larger key (with
    time-ordered ids: the newer entry)."""
    if k <= 0:
        return []
    return heapq.nlargest(k, scores.items(), key=lambda item: (item[1], item[0]))


def rank(query: str, documents: Mapping[K, str], k: int = 5) -> list[tuple[K, float]]:
    """Rank an in-memory corpus: the scores a recall computes from stored postings."""
    terms = set(query_terms(query))
    postings: list[Posting[K]] = []
    total = 0
    for key, text in documents.items():
        frequencies, length = term_frequencies(text)
        total += length
        postings.extend(
            Posting(key=key, term=term, tf=tf, length=length)
            for term, tf in frequencies.items()
            if term in terms
        )
    stats = CorpusStats(documents=len(documents), total_terms=total)
    return top_k(score_postings(postings, stats), k)
