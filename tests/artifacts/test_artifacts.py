"""Content-addressed artifacts on a real S3 server (SeaweedFS) and on the local filesystem."""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid

import pytest
from django.core.files.storage import FileSystemStorage, storages

from openrath_project.artifacts import (
    ArtifactCorrupted,
    ArtifactRef,
    artifact_exists,
    artifact_get,
    artifact_key,
    artifact_open,
    artifact_put,
    artifact_put_stream,
)
from openrath_project.errors import (
    ArtifactStoreUnavailable,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)
from tests.s3 import SeaweedS3, closed_port, s3_storage_options, start_seaweed, storages_with_s3

TENANT_A = uuid.UUID("0190a000-0000-7000-8000-00000000000a")
TENANT_B = uuid.UUID("0190b000-0000-7000-8000-00000000000b")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def overwrite_object(seaweed: SeaweedS3 | None, key: str, data: bytes) -> None:
    """Change the stored bytes behind the library's back (bit rot, tampering)."""
    backend = storages["default"]
    if isinstance(backend, FileSystemStorage):
        with open(backend.path(key), "wb") as handle:
            handle.write(data)
        return
    assert seaweed is not None
    seaweed.client().put_object(Bucket=seaweed.bucket, Key=key, Body=data)


def stored_names(storage, tenant_id: uuid.UUID, digest: str) -> list[str]:
    _, files = storage.listdir(f"artifacts/{tenant_id}/{digest[:2]}")
    return sorted(files)


# --- Round trips on both backends ---------------------------------------------------------------


def test_round_trip(storage):
    data = b"checkpoint payload \x00\x01\xff" * 100
    ref = artifact_put(tenant_id=TENANT_A, data=data, media_type="application/json")
    digest = sha(data)
    assert ref == ArtifactRef(
        digest=digest,
        size=len(data),
        media_type="application/json",
        key=f"artifacts/{TENANT_A}/{digest[:2]}/{digest}",
    )
    assert artifact_get(tenant_id=TENANT_A, digest=digest) == data
    assert artifact_exists(tenant_id=TENANT_A, digest=digest) is True
    assert artifact_exists(tenant_id=TENANT_A, digest=sha(b"something else")) is False
    with artifact_open(tenant_id=TENANT_A, digest=digest) as handle:
        assert handle.read() == data


def test_empty_artifact_round_trips(storage):
    ref = artifact_put(tenant_id=TENANT_A, data=b"")
    assert (ref.digest, ref.size) == (sha(b""), 0)
    assert artifact_get(tenant_id=TENANT_A, digest=ref.digest) == b""


def test_the_same_content_is_stored_once(storage):
    tenant = uuid.uuid4()  # the bucket outlives the test: a directory of this test's own
    data = b"the same bytes, written twice"
    first = artifact_put(tenant_id=tenant, data=data)
    second = artifact_put(tenant_id=tenant, data=data, media_type="text/plain")
    assert (first.digest, first.key, first.size) == (second.digest, second.key, second.size)
    assert second.media_type == "text/plain"  # a property of the reference, not of the bytes
    assert stored_names(storage, tenant, first.digest) == [first.digest]


def test_a_streamed_large_artifact_round_trips(storage):
    data = os.urandom(9 * 1024 * 1024 + 17)  # past the S3 multipart threshold (8 MiB)
    tenant = uuid.uuid4()  # other tests' objects share the bucket's two-hex directories
    ref = artifact_put_stream(tenant_id=tenant, stream=io.BytesIO(data))
    assert (ref.digest, ref.size) == (sha(data), len(data))
    with artifact_open(tenant_id=tenant, digest=ref.digest) as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == ref.digest
    again = artifact_put(tenant_id=tenant, data=data)
    assert again.key == ref.key
    assert stored_names(storage, tenant, ref.digest) == [ref.digest]


def test_a_corrupted_object_is_detected_on_read(storage, request):
    on_s3 = request.node.callspec.params["storage"] == "s3"
    seaweed = request.getfixturevalue("seaweed") if on_s3 else None
    data = b"the original bytes"
    ref = artifact_put(tenant_id=TENANT_A, data=data)
    tampered = b"the tampered bytes"  # same length: only the hash can tell
    overwrite_object(seaweed, ref.key, tampered)
    with pytest.raises(ArtifactCorrupted) as raised:
        artifact_get(tenant_id=TENANT_A, digest=ref.digest)
    assert raised.value.status_code == 500
    assert raised.value.code == "artifact_corrupted"
    assert raised.value.details == {
        "digest": ref.digest,
        "actual_digest": sha(tampered),
        "size": len(tampered),
    }
    entered = []
    with (
        pytest.raises(ArtifactCorrupted),
        artifact_open(tenant_id=TENANT_A, digest=ref.digest) as handle,
    ):
        entered.append(handle.read())  # never reached: verified before the block runs
    assert entered == []
    # Putting the same content again does not paper over it (same size): it stays detectable.
    artifact_put(tenant_id=TENANT_A, data=data)
    with pytest.raises(ArtifactCorrupted):
        artifact_get(tenant_id=TENANT_A, digest=ref.digest)


def test_tenant_prefixes_are_isolated(storage):
    data = b"tenant A's secret report"
    ref = artifact_put(tenant_id=TENANT_A, data=data)
    assert ref.key.startswith(f"artifacts/{TENANT_A}/")
    # B knows the digest, but every key is built from the caller's tenant.
    assert artifact_exists(tenant_id=TENANT_B, digest=ref.digest) is False
    with pytest.raises(NotFound) as raised:
        artifact_get(tenant_id=TENANT_B, digest=ref.digest)
    assert raised.value.status_code == 404
    # B storing the same bytes gets its own copy under its own prefix.
    mine = artifact_put(tenant_id=TENANT_B, data=data)
    assert mine.key == f"artifacts/{TENANT_B}/{ref.digest[:2]}/{ref.digest}"
    storage.delete(ref.key)
    assert artifact_get(tenant_id=TENANT_B, digest=ref.digest) == data
    assert artifact_exists(tenant_id=TENANT_A, digest=ref.digest) is False


@pytest.mark.parametrize(
    ("tenant_id", "digest"),
    [
        ("../0190b000-0000-7000-8000-00000000000b", "a" * 64),
        (TENANT_A, "../" + "a" * 61),
        (TENANT_A, "A" * 64),
        (TENANT_A, "a" * 63),
        ("not-a-uuid", "a" * 64),
    ],
)
def test_malformed_references_are_refused(local_storage, tenant_id, digest):
    with pytest.raises(ValidationFailed):
        artifact_get(tenant_id=tenant_id, digest=digest)
    with pytest.raises(ValidationFailed):
        artifact_key(tenant_id=tenant_id, digest=digest)


def test_size_limit(storage, settings):
    settings.OPENRATH_MAX_ARTIFACT_BYTES = 10
    ok = artifact_put(tenant_id=TENANT_A, data=b"0123456789")
    assert ok.size == 10
    with pytest.raises(PayloadTooLarge) as raised:
        artifact_put(tenant_id=TENANT_A, data=b"0123456789X")
    assert (raised.value.status_code, raised.value.details) == (413, {"limit_bytes": 10})
    with pytest.raises(PayloadTooLarge):
        artifact_put_stream(tenant_id=TENANT_A, stream=io.BytesIO(b"0123456789X"))
    assert artifact_exists(tenant_id=TENANT_A, digest=sha(b"0123456789X")) is False


def test_the_limit_defaults_to_64_mib():
    from django.conf import settings

    assert settings.OPENRATH_MAX_ARTIFACT_BYTES == 64 * 1024 * 1024


def test_a_partial_local_file_is_rewritten(local_storage):
    data = b"complete content " * 64
    key = artifact_key(tenant_id=TENANT_A, digest=sha(data))
    path = storages["default"].path(key)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(data[:20])  # what a crash in the middle of a write leaves
    with pytest.raises(ArtifactCorrupted):
        artifact_get(tenant_id=TENANT_A, digest=sha(data))
    artifact_put(tenant_id=TENANT_A, data=data)
    assert artifact_get(tenant_id=TENANT_A, digest=sha(data)) == data
    assert stored_names(local_storage, TENANT_A, sha(data)) == [sha(data)]


# --- Outages ------------------------------------------------------------------------------------


def _assert_unavailable(call) -> None:
    started = time.monotonic()
    with pytest.raises(ArtifactStoreUnavailable) as raised:
        call()
    # Bounded waits (2 s connect timeout, 3 attempts), not botocore's 60 s connect timeout per
    # attempt; the bound leaves a loaded machine a wide margin.
    assert time.monotonic() - started < 45
    assert (raised.value.status_code, raised.value.code) == (503, "storage_unavailable")
    assert raised.value.as_body()["error"]["code"] == "storage_unavailable"


def test_s3_down_raises_store_unavailable(settings):
    settings.STORAGES = storages_with_s3(
        settings.STORAGES,
        s3_storage_options(endpoint_url=f"http://127.0.0.1:{closed_port()}", bucket="openrath"),
    )
    _assert_unavailable(lambda: artifact_put(tenant_id=TENANT_A, data=b"x"))
    _assert_unavailable(lambda: artifact_get(tenant_id=TENANT_A, digest=sha(b"x")))
    _assert_unavailable(lambda: artifact_exists(tenant_id=TENANT_A, digest=sha(b"x")))


def test_wrong_credentials_are_unavailable_not_missing(seaweed, settings):
    settings.STORAGES = storages_with_s3(
        settings.STORAGES, seaweed.storage_options(secret_key="not-the-secret")
    )
    _assert_unavailable(lambda: artifact_put(tenant_id=TENANT_A, data=b"x"))
    _assert_unavailable(lambda: artifact_get(tenant_id=TENANT_A, digest=sha(b"x")))


def test_a_missing_bucket_is_unavailable(seaweed, settings):
    settings.STORAGES = storages_with_s3(
        settings.STORAGES,
        s3_storage_options(endpoint_url=seaweed.endpoint_url, bucket="no-such-bucket-here"),
    )
    _assert_unavailable(lambda: artifact_put(tenant_id=TENANT_A, data=b"x"))


def test_an_unwritable_local_directory_is_unavailable(settings, tmp_path):
    root = tmp_path / "read-only-root"
    root.mkdir()
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(root / "file-in-the-way")},
        },
    }
    (root / "file-in-the-way").write_text("a file where the directory should be")
    _assert_unavailable(lambda: artifact_put(tenant_id=TENANT_A, data=b"x"))


def test_the_api_maps_store_unavailable_to_503():
    from openrath_project.api.exceptions import response_for

    response = response_for(ArtifactStoreUnavailable("the artifact storage is unavailable"))
    assert response is not None
    assert response.status_code == 503
    assert response.data["error"]["code"] == "storage_unavailable"


@pytest.mark.slow
def test_s3_server_killed_after_use(settings, tmp_path, db, client):
    """The S3 server dies under a running application: reads and writes fail fast with
    ``ArtifactStoreUnavailable`` and ``/readyz`` turns 503 naming ``storage``."""
    server = start_seaweed(tmp_path)
    try:
        settings.STORAGES = storages_with_s3(settings.STORAGES, server.storage_options())
        ref = artifact_put(tenant_id=TENANT_A, data=b"before the outage")
        assert artifact_get(tenant_id=TENANT_A, digest=ref.digest) == b"before the outage"
        assert client.get("/readyz").status_code == 200
    finally:
        server.stop()
    _assert_unavailable(lambda: artifact_get(tenant_id=TENANT_A, digest=ref.digest))
    _assert_unavailable(lambda: artifact_put(tenant_id=TENANT_A, data=b"during the outage"))
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["storage"]


def test_ensure_bucket_creates_once_and_proves_writes(seaweed):
    from openrath_project.s3config import ensure_bucket
    from tests.s3 import ACCESS_KEY, SECRET_KEY

    arguments = {
        "endpoint_url": seaweed.endpoint_url,
        "bucket": "openrath-ensure",
        "access_key": ACCESS_KEY,
        "secret_key": SECRET_KEY,
        "timeout": 30,
    }
    assert ensure_bucket(**arguments) == "created"
    assert ensure_bucket(**arguments) == "exists"
    listed = seaweed.client().list_objects_v2(Bucket="openrath-ensure")
    assert listed.get("KeyCount", 0) == 0  # the probe object is deleted again


def test_ensure_bucket_cli_names_a_missing_variable(monkeypatch, capsys):
    from openrath_project.s3config import main

    monkeypatch.delenv("S3_BUCKET", raising=False)
    assert main(["--ensure-bucket"]) == 2
    assert capsys.readouterr().err == "error: S3_BUCKET is not set\n"


def test_a_deduplicated_put_refreshes_the_stored_objects_modification_time(storage):
    # Retention deletes an unreferenced artifact only once it is older than its grace age; a
    # put of the same bytes is about to be referenced, so the object must look new again.
    ref = artifact_put(tenant_id=TENANT_A, data=b"same bytes")
    first = storage.get_modified_time(ref.key)
    try:
        path = storage.path(ref.key)
    except NotImplementedError:
        time.sleep(1.1)  # S3's LastModified has a resolution of one second
    else:
        old = first.timestamp() - 7200
        os.utime(path, (old, old))
        first = storage.get_modified_time(ref.key)
    again = artifact_put(tenant_id=TENANT_A, data=b"same bytes")
    assert again.key == ref.key
    assert storage.get_modified_time(ref.key) > first
    with storage.open(ref.key) as stored:
        assert stored.read() == b"same bytes"
