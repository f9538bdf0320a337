"""Tracing fixtures: worker processes (the drills'), console users (the console's) and a real
Phoenix server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.conftest import login, member, registry, waiting  # noqa: F401 - fixtures
from tests.drills.conftest import processes  # noqa: F401 - a fixture used by these tests
from tests.observability.phoenix import PhoenixServer, start_phoenix


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory) -> Iterator[PhoenixServer]:
    server = start_phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        yield server
    finally:
        server.stop()
        print(f"--- phoenix.log ---\n{server.log_tail()}")
