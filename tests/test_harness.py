"""The test harness's own rules: under CI=true a missing service fails, forced SQLite skips."""

from __future__ import annotations

import pytest
from django.db import connection

from tests import settings as test_settings
from tests import support


@pytest.fixture
def on_sqlite_under_ci(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(support, "CI", True)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    return monkeypatch


def test_forced_sqlite_skips_postgres_tests_even_under_ci(on_sqlite_under_ci):
    on_sqlite_under_ci.setattr(test_settings, "SQLITE_FORCED", True)
    on_sqlite_under_ci.setattr(
        test_settings, "POSTGRES_UNAVAILABLE", "OPENRATH_TEST_DB=sqlite forces SQLite"
    )
    with pytest.raises(pytest.skip.Exception) as skipped:
        support.require_postgres()
    assert "OPENRATH_TEST_DB=sqlite forces SQLite" in str(skipped.value)


def test_unreachable_postgres_fails_under_ci(on_sqlite_under_ci):
    on_sqlite_under_ci.setattr(test_settings, "SQLITE_FORCED", False)
    on_sqlite_under_ci.setattr(test_settings, "POSTGRES_UNAVAILABLE", "OperationalError: refused")
    with pytest.raises(pytest.fail.Exception) as failed:
        support.require_postgres()
    assert "required service missing under CI=true" in str(failed.value)
    assert "OperationalError: refused" in str(failed.value)
