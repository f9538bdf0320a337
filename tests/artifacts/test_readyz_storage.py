"""``/readyz`` checks the artifact storage for real: SeaweedFS up, and S3 unreachable."""

from __future__ import annotations

import pytest

from tests.s3 import closed_port, s3_storage_options, storages_with_s3

pytestmark = pytest.mark.django_db


def test_readyz_with_s3_up(client, s3_storage, seaweed):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["status"], body["failed"]) == ("ready", [])
    assert body["checks"]["storage"]["ok"] is True
    # the probe object is deleted again
    listed = seaweed.client().list_objects_v2(Bucket=seaweed.bucket, Prefix="_readyz/")
    assert listed.get("KeyCount", 0) == 0


def test_readyz_reports_s3_down_as_503_naming_storage(client, settings):
    settings.STORAGES = storages_with_s3(
        settings.STORAGES,
        s3_storage_options(endpoint_url=f"http://127.0.0.1:{closed_port()}", bucket="openrath"),
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["failed"] == ["storage"]
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["storage"]["ok"] is False
    assert body["checks"]["storage"]["error"].startswith("EndpointConnectionError: ")
