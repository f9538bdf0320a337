"""Content-addressed artifact storage: large values referenced by their SHA-256, per tenant.

An artifact's key is ``artifacts/<tenant id>/<sha256[:2]>/<sha256>`` in Django's
``default_storage`` (S3 via django-storages in production, a local directory in the embedded
profile). Properties:

* **Content addressing.** The digest is computed here, never taken from the caller; writing the
  same bytes twice stores them once.
* **Verification on read.** Every read hashes the bytes and compares them with the digest; a
  mismatch raises :class:`ArtifactCorrupted` — bad bytes are never returned.
* **Tenant prefix.** Every key is built from the *caller's* tenant id, so a digest known to
  tenant A never reads tenant B's object (the same bytes are stored once per tenant).
* **Limits.** ``OPENRATH_MAX_ARTIFACT_BYTES`` (default 64 MiB) → ``PayloadTooLarge`` (413).
* **Outages.** A storage that does not answer (or refuses: credentials, missing bucket, full
  disk) raises :class:`~openrath_project.errors.ArtifactStoreUnavailable` (503).

Large content streams: :func:`artifact_put_stream` spools to a temporary file while hashing,
:func:`artifact_open` yields a verified temporary file; neither holds the whole value in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

# boto3 wraps a failed upload's ClientError in Boto3Error (S3UploadFailedError).
from boto3.exceptions import Boto3Error
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, default_storage

from openrath_project.errors import (
    ArtifactStoreUnavailable,
    DomainError,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)

logger = logging.getLogger(__name__)

PREFIX = "artifacts"
DEFAULT_MEDIA_TYPE = "application/octet-stream"
#: Read and hash in pieces of this size; spool to disk beyond ``_SPOOL_IN_MEMORY`` bytes.
_CHUNK = 1024 * 1024
_SPOOL_IN_MEMORY = 8 * 1024 * 1024
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_MEDIA_TYPE_RE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}$")

T = TypeVar("T")


class ArtifactCorrupted(DomainError):
    """The stored bytes do not hash to their digest (bit rot, a partial write, tampering).

    Never the caller's fault and not transient: a 500 with its own code, logged as an error.
    The object is left in place as evidence; restore it from a backup (docs/operations.md).
    """

    status_code = 500
    code = "artifact_corrupted"


@dataclass(frozen=True)
class ArtifactRef:
    """What a caller keeps to find an artifact again: its digest (and the rest for display)."""

    digest: str
    size: int
    media_type: str
    key: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "size": self.size,
            "media_type": self.media_type,
            "key": self.key,
        }


# --- Keys ---------------------------------------------------------------------------------------


def _tenant_part(tenant_id: uuid.UUID | str) -> str:
    """The tenant's id in its canonical form; anything else is refused (no path tricks)."""
    try:
        return str(tenant_id if isinstance(tenant_id, uuid.UUID) else uuid.UUID(str(tenant_id)))
    except ValueError as exc:
        raise ValidationFailed(
            "tenant_id must be a UUID", details={"tenant_id": str(tenant_id)[:100]}
        ) from exc


def check_digest(digest: str) -> str:
    """A SHA-256 digest as 64 lowercase hex characters; anything else is a 400."""
    if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
        raise ValidationFailed(
            "an artifact digest is 64 lowercase hexadecimal characters (SHA-256)",
            details={"digest": str(digest)[:100]},
        )
    return digest


def artifact_key(*, tenant_id: uuid.UUID | str, digest: str) -> str:
    """``artifacts/<tenant id>/<digest[:2]>/<digest>``: the caller's tenant, always."""
    check_digest(digest)
    return f"{PREFIX}/{_tenant_part(tenant_id)}/{digest[:2]}/{digest}"


def max_artifact_bytes() -> int:
    return int(getattr(settings, "OPENRATH_MAX_ARTIFACT_BYTES", 64 * 1024 * 1024))


def _check_media_type(media_type: str) -> str:
    if not isinstance(media_type, str) or not _MEDIA_TYPE_RE.match(media_type):
        raise ValidationFailed(
            "media_type must look like type/subtype", details={"media_type": str(media_type)[:100]}
        )
    return media_type


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"artifact of {size} bytes exceeds the limit of {limit} bytes",
        details={"limit_bytes": limit},
    )


# --- Talking to the storage ---------------------------------------------------------------------


def _is_not_found(exc: BaseException) -> bool:
    if isinstance(exc, FileNotFoundError):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return status == 404 and code != "NoSuchBucket"
    return False


def _storage_call(operation: str, key: str, call: Callable[[], T]) -> T:
    """Run one storage operation; an outage becomes ``ArtifactStoreUnavailable``.

    ``FileNotFoundError`` passes through (the caller decides what a missing object means);
    our own domain errors pass through untouched.
    """
    try:
        return call()
    except (DomainError, FileNotFoundError):
        raise
    except ClientError as exc:
        if _is_not_found(exc):
            raise FileNotFoundError(key) from exc
        raise _unavailable(operation, key, exc) from exc
    except (BotoCoreError, Boto3Error, OSError) as exc:
        raise _unavailable(operation, key, exc) from exc


def _unavailable(operation: str, key: str, exc: BaseException) -> ArtifactStoreUnavailable:
    logger.warning(
        "artifact storage failed to %s %s: %s: %s", operation, key, type(exc).__name__, exc
    )
    return ArtifactStoreUnavailable(
        f"the artifact storage is unavailable ({operation} failed: {type(exc).__name__})",
        details={"operation": operation},
    )


def _storage(storage: Storage | None) -> Storage:
    return storage if storage is not None else default_storage


def _write(storage: Storage, key: str, content: IO[bytes], size: int, media_type: str) -> None:
    """Store ``content`` under exactly ``key`` unless an intact copy is already there.

    Check-then-write is safe here because the content is addressed: whoever wins a race wrote
    the same bytes. A storage that refuses to overwrite (``file_overwrite=False``, local files)
    saves the loser under another name, which is deleted again.
    """
    if _storage_call("check", key, lambda: storage.exists(key)):
        stored_size = _storage_call("check", key, lambda: storage.size(key))
        if stored_size == size:
            # Deduplicated: the bytes are already there (made durable here too: the put that
            # wrote them may have died before it could, and before anything referenced them).
            # Its modification time is refreshed: retention deletes an unreferenced artifact
            # only once it is older than a grace age, and this put's reference is not
            # committed yet (retention_app, "Artifacts").
            _storage_call("write", key, lambda: _make_durable(storage, key))
            _storage_call("write", key, lambda: _touch(storage, key))
            return
        # A partial write (a local file cut short by a crash): replace it.
        logger.warning(
            "artifact %s has %s bytes instead of %s; rewriting it", key, stored_size, size
        )
        _storage_call("delete", key, lambda: storage.delete(key))
    content.seek(0)
    upload = File(content, name=key.rsplit("/", 1)[-1])
    upload.size = size
    upload.content_type = media_type  # type: ignore[attr-defined]  # S3 stores it as Content-Type
    saved = _storage_call("write", key, lambda: storage.save(key, upload))
    if saved != key:  # lost a race to an identical write
        _storage_call("delete", saved, lambda: storage.delete(saved))
    _storage_call("write", key, lambda: _make_durable(storage, key))


def _touch(storage: Storage, key: str) -> None:
    """Set the stored object's modification time to now: ``utime`` of a local file; on S3 a
    copy of the object onto itself with its metadata restated (S3 has no other way to change
    ``LastModified``; the bytes are copied server-side, not sent again)."""
    try:
        os.utime(storage.path(key))
        return
    except NotImplementedError:
        pass
    bucket = getattr(storage, "bucket", None)
    if bucket is None:  # neither a local file system nor S3: nothing to refresh
        return
    from storages.utils import clean_name  # the S3 backend's own naming, as its _save uses it

    name = storage._normalize_name(clean_name(key))  # type: ignore[attr-defined]
    stored = bucket.Object(name)
    stored.copy_from(
        CopySource={"Bucket": bucket.name, "Key": name},
        MetadataDirective="REPLACE",
        ContentType=stored.content_type or DEFAULT_MEDIA_TYPE,
        Metadata=stored.metadata or {},
    )


def _make_durable(storage: Storage, key: str) -> None:
    """A local file is on disk before the commit that references it can be: its bytes, and the
    directory entries that lead to it from the storage root (a new tenant or prefix directory
    is an entry too), are fsynced. Remote storage (S3) needs nothing more: a PUT is
    acknowledged once the object is durable."""
    try:
        path = Path(storage.path(key))
    except NotImplementedError:
        return  # not a local file system
    root = Path(storage.path("")).resolve()
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    directory = path.parent.resolve()
    for each in (directory, *directory.parents):
        descriptor = os.open(each, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        if each == root or root not in each.parents:
            break


# --- Public API ---------------------------------------------------------------------------------


def artifact_put(
    *,
    tenant_id: uuid.UUID | str,
    data: bytes,
    media_type: str = DEFAULT_MEDIA_TYPE,
    storage: Storage | None = None,
) -> ArtifactRef:
    """Store ``data`` for the tenant (once, however often it is put) and return its reference."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValidationFailed("artifact data must be bytes")
    _check_media_type(media_type)
    limit = max_artifact_bytes()
    size = len(data)
    if size > limit:
        raise _too_large(size, limit)
    digest = hashlib.sha256(data).hexdigest()
    key = artifact_key(tenant_id=tenant_id, digest=digest)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
        spool.write(data)
        _write(_storage(storage), key, spool, size, media_type)
    return ArtifactRef(digest=digest, size=size, media_type=media_type, key=key)


def artifact_put_stream(
    *,
    tenant_id: uuid.UUID | str,
    stream: IO[bytes],
    media_type: str = DEFAULT_MEDIA_TYPE,
    storage: Storage | None = None,
) -> ArtifactRef:
    """Like :func:`artifact_put` for content read from ``stream``: hashed while it is spooled
    to a temporary file, refused as soon as it passes the size limit."""
    _check_media_type(media_type)
    tenant_part = _tenant_part(tenant_id)
    limit = max_artifact_bytes()
    hasher = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
        while True:
            piece = stream.read(_CHUNK)
            if not piece:
                break
            size += len(piece)
            if size > limit:
                raise _too_large(size, limit)
            hasher.update(piece)
            spool.write(piece)
        digest = hasher.hexdigest()
        key = artifact_key(tenant_id=tenant_part, digest=digest)
        _write(_storage(storage), key, spool, size, media_type)
    return ArtifactRef(digest=digest, size=size, media_type=media_type, key=key)


def artifact_exists(
    *, tenant_id: uuid.UUID | str, digest: str, storage: Storage | None = None
) -> bool:
    """Whether the tenant has this artifact (another tenant's copy does not count)."""
    key = artifact_key(tenant_id=tenant_id, digest=digest)
    store = _storage(storage)
    return bool(_storage_call("check", key, lambda: store.exists(key)))


def _corrupted(key: str, digest: str, actual: str, size: int) -> ArtifactCorrupted:
    logger.error(
        "artifact %s is corrupted: its %s bytes hash to %s, not %s", key, size, actual, digest
    )
    return ArtifactCorrupted(
        "the stored artifact does not match its digest",
        details={"digest": digest, "actual_digest": actual, "size": size},
    )


@contextmanager
def artifact_open(
    *, tenant_id: uuid.UUID | str, digest: str, storage: Storage | None = None
) -> Iterator[IO[bytes]]:
    """A verified, readable copy of the artifact (a temporary file, spooled to disk when large).

    The whole object is hashed *before* the block gets the file, so a consumer never sees a
    byte of a corrupted artifact. Raises ``NotFound`` (404) when the tenant has no such
    artifact, :class:`ArtifactCorrupted` on a mismatch, ``ArtifactStoreUnavailable`` (503).
    """
    key = artifact_key(tenant_id=tenant_id, digest=digest)
    store = _storage(storage)
    hasher = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:

        def copy() -> None:
            nonlocal size
            with store.open(key, "rb") as handle:
                while True:
                    piece = handle.read(_CHUNK)
                    if not piece:
                        break
                    hasher.update(piece)
                    size += len(piece)
                    spool.write(piece)

        try:
            _storage_call("read", key, copy)
        except FileNotFoundError as exc:
            raise NotFound("artifact not found", details={"digest": digest}) from exc
        actual = hasher.hexdigest()
        if actual != digest:
            raise _corrupted(key, digest, actual, size)
        spool.seek(0)
        yield spool


def artifact_get(
    *, tenant_id: uuid.UUID | str, digest: str, storage: Storage | None = None
) -> bytes:
    """The artifact's bytes, verified against the digest (see :func:`artifact_open`)."""
    with artifact_open(tenant_id=tenant_id, digest=digest, storage=storage) as handle:
        return handle.read()
