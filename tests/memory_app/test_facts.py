"""Fingerprints and reading a model's list of facts, without a database."""

from __future__ import annotations

import pytest

from memory_app import facts


def test_fingerprint_ignores_case_and_spacing_only():
    base = facts.fingerprint("The deploy freeze starts Friday.")
    assert facts.fingerprint("  the DEPLOY\tfreeze\n starts   friday. ") == base
    assert facts.fingerprint("The deploy freeze starts Friday!") != base
    assert len(base) == 64
    assert facts.normalise("  A \n B  ") == "a b"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('["fact a", "fact b"]', ["fact a", "fact b"]),
        ('Here you go:\n```json\n["fact a",\n "fact b"]\n```\nDone.', ["fact a", "fact b"]),
        ('["fact a", "  fact   b ", "", 3, null, "FACT A"]', ["fact a", "fact b"]),
        (
            "- fact a\n* fact b\n1. fact c\n2) fact d\nnot a fact\n-nospace",
            ["fact a", "fact b", "fact c", "fact d"],
        ),
        ("[]", []),
        ("nothing to remember", []),
        ("", []),
        (None, []),
        ('{"facts": ["a"]}', ["a"]),
        ("[not json\n- fact a", ["fact a"]),
    ],
)
def test_parse_fact_list(answer, expected):
    assert facts.parse_fact_list(answer, limit=10, max_chars=100) == expected


def test_parse_fact_list_limits():
    answer = '["one", "two", "three", "' + "x" * 101 + '"]'
    assert facts.parse_fact_list(answer, limit=2, max_chars=100) == ["one", "two"]
    assert facts.parse_fact_list(answer, limit=10, max_chars=100) == ["one", "two", "three"]
    assert facts.parse_fact_list(answer, limit=0, max_chars=100) == []


def test_dedupe_keeps_first_spelling():
    assert facts.dedupe(["A b", "a  B", "c"]) == ["A b", "c"]
