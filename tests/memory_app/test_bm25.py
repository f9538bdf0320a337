"""BM25 tokenisation and scoring, without a database."""

from __future__ import annotations

import math

import pytest

from memory_app import bm25
from tests.memory_app.labelled import ENTRIES, EXPECTED, RELEVANT


class TestTokenize:
    def test_casefold_nfkc_stopwords_and_separators(self):
        assert bm25.tokenize("The OPENAI_API_KEY is in the Ｓｅｃｒｅｔｓ store!") == [
            "openai",
            "api",
            "key",
            "secret",
            "store",
        ]

    def test_numbers_and_non_latin_words_are_terms(self):
        assert bm25.tokenize("Port 5432 — Größe straße, 東京 2024-03") == [
            "port",
            "5432",
            "grösse",  # casefold: ß -> ss
            "strasse",
            "東京",
            "2024",
            "03",
        ]

    @pytest.mark.parametrize(
        ("word", "stem"),
        [
            ("deployments", "deployment"),
            ("policies", "policy"),
            ("caches", "cache"),
            ("status", "status"),
            ("access", "access"),
            ("goes", "goe"),
            ("shoes", "shoe"),
            ("is", "is"),
            ("rows", "row"),
            ("bus", "bus"),
        ],
    )
    def test_s_stemmer(self, word, stem):
        assert bm25.stem(word) == stem

    def test_long_tokens_are_cut(self):
        assert bm25.tokenize("x" * 100) == ["x" * bm25.MAX_TERM_LENGTH]

    def test_term_frequencies_count_terms_not_stopwords(self):
        assert bm25.term_frequencies("The cat and the cats saw a dog.") == (
            {"cat": 2, "saw": 1, "dog": 1},
            4,
        )

    def test_query_terms_are_distinct_in_order_and_capped(self):
        assert bm25.query_terms("Deploy the deploys, then DEPLOY quickly?") == ["deploy", "quickly"]
        many = " ".join(f"w{i}" for i in range(200))
        assert bm25.query_terms(many) == [f"w{i}" for i in range(bm25.MAX_QUERY_TERMS)]
        assert bm25.query_terms("the and of a") == []

    def test_query_and_stored_terms_agree(self):
        text = "Rollbacks of the Helm releases: ÉTÉ 2024 plans"
        assert bm25.query_terms(text) == list(dict.fromkeys(bm25.tokenize(text)))


class TestScoring:
    def test_idf_is_positive_and_falls_with_df(self):
        values = [bm25.idf(100, df) for df in (1, 10, 50, 100)]
        assert values == sorted(values, reverse=True)
        assert values[-1] > 0
        assert bm25.idf(100, 1) == pytest.approx(math.log(1 + 99.5 / 1.5))

    def test_term_frequency_saturates(self):
        scores = [
            bm25.term_score(tf=tf, length=10, avgdl=10.0, idf_value=1.0) for tf in (1, 2, 4, 100)
        ]
        assert scores == sorted(scores)
        assert scores[-1] < 1.0 * (bm25.K1 + 1)
        assert scores[0] == pytest.approx(1.0)  # tf=1 at average length: idf exactly

    def test_longer_entries_score_lower(self):
        short = bm25.term_score(tf=1, length=5, avgdl=10.0, idf_value=2.0)
        long = bm25.term_score(tf=1, length=20, avgdl=10.0, idf_value=2.0)
        assert short > long

    def test_score_of_a_tiny_corpus_by_hand(self):
        docs = {1: "alpha beta", 2: "alpha gamma gamma", 3: "delta"}
        idf_gamma = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
        idf_alpha = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
        avgdl = 6 / 3
        gamma_2 = idf_gamma * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / avgdl))
        alpha_2 = idf_alpha * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 3 / avgdl))
        alpha_1 = idf_alpha * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / avgdl))
        ranked = bm25.rank("gamma alpha", docs, k=5)
        assert [key for key, _ in ranked] == [2, 1]
        assert ranked[0][1] == pytest.approx(gamma_2 + alpha_2)
        assert ranked[1][1] == pytest.approx(alpha_1)

    def test_ties_go_to_the_larger_key(self):
        assert bm25.top_k({1: 2.0, 3: 2.0, 2: 5.0, 4: 1.0}, 3) == [(2, 5.0), (3, 2.0), (1, 2.0)]
        assert bm25.top_k({1: 1.0}, 0) == []

    def test_no_shared_term_no_result(self):
        assert bm25.rank("zebra", {1: "alpha"}) == []
        assert bm25.rank("the", {1: "the alpha"}) == []

    def test_empty_corpus_stats(self):
        stats = bm25.CorpusStats(documents=0, total_terms=0)
        assert stats.avgdl == 0.0
        assert bm25.term_score(tf=1, length=3, avgdl=0.0, idf_value=1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("query", list(EXPECTED))
def test_labelled_set_ranks_as_expected(query):
    ranked = [key for key, _ in bm25.rank(query, ENTRIES, k=5)]
    assert ranked == EXPECTED[query]
    assert set(ranked[: len(RELEVANT[query])]) == RELEVANT[query]
