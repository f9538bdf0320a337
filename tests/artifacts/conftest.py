"""Artifact storage fixtures: one real SeaweedFS S3 server per test session, and the local
filesystem storage of the embedded profile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.storage import Storage, default_storage

from tests.runs_app.conftest import registry  # noqa: F401 - the runs fixture, reused here
from tests.s3 import SeaweedS3, start_seaweed, storages_with_s3


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    server = start_seaweed(tmp_path_factory.mktemp("seaweed"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_storage(seaweed: SeaweedS3, settings) -> Storage:
    """``default_storage`` on the SeaweedFS bucket (as in production with ``S3_BUCKET``)."""
    settings.STORAGES = storages_with_s3(settings.STORAGES, seaweed.storage_options())
    return default_storage


@pytest.fixture
def local_storage(settings, tmp_path: Path) -> Storage:
    """``default_storage`` on a local directory (the embedded profile)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts-root")},
        },
    }
    return default_storage


@pytest.fixture(params=["s3", "local"])
def storage(request: pytest.FixtureRequest) -> Storage:
    """Each test using it runs on SeaweedFS and on the local filesystem."""
    return request.getfixturevalue(f"{request.param}_storage")
