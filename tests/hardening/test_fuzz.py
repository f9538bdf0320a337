"""A bounded fuzzing pass (benchmarks/fuzz.py runs the long one): schemathesis, from the
committed OpenAPI document, against a real embedded server process."""

from __future__ import annotations

import tempfile

import pytest

from benchmarks import fuzz

pytestmark = pytest.mark.slow


def test_fuzzing_finds_nothing():
    server, base, tokens, env = fuzz.start_server(tempfile.mkdtemp(prefix="openrath-fuzz-"))
    try:
        result = fuzz.fuzz(base, tokens, examples=5, max_seconds=240, env=env)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert result["failures"] == []
    assert result["tried"] >= 300
    assert not any(status >= 500 for status in result["statuses"])
    assert {200, 201, 400, 403, 404} <= set(result["statuses"])
