"""The botocore client configuration of the S3 artifact storage (used by settings and tests).

Bounded network waits: an unreachable S3 endpoint is reported (``ArtifactStoreUnavailable``,
503 on ``/readyz``) within seconds, instead of botocore's 60 s connect timeout times its retries.
"""

from __future__ import annotations

from botocore.config import Config

from openrath_project.secretfiles import SecretFileError, secret_value


def s3_client_config(
    *, connect_timeout: float = 3.0, read_timeout: float = 30.0, max_attempts: int = 3
) -> Config:
    """Path-style addressing and SigV4 (what SeaweedFS, MinIO and AWS all accept), bounded
    timeouts, and botocore's ``standard`` retry mode; ``max_attempts`` counts the first try
    (botocore's ``total_max_attempts``: its ``retries["max_attempts"]`` would count the retries
    only, one attempt more than asked). A storage call waits at most about ``max_attempts`` x
    (``connect_timeout`` + ``read_timeout``) on a connection that hangs."""
    return Config(
        s3={"addressing_style": "path"},
        signature_version="s3v4",
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": max(1, max_attempts), "mode": "standard"},
    )


def ensure_bucket(
    *,
    endpoint_url: str | None,
    bucket: str,
    access_key: str,
    secret_key: str,
    region: str = "us-east-1",
    timeout: float = 90.0,
) -> str:
    """Create ``bucket`` unless it exists, then write and delete a probe object; retry until
    the storage answers or ``timeout`` passes. Returns what happened (``created``/``exists``)."""
    import time

    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=s3_client_config(connect_timeout=2, read_timeout=10, max_attempts=1),
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            try:
                client.head_bucket(Bucket=bucket)
                outcome = "exists"
            except client.exceptions.ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                    raise
                client.create_bucket(Bucket=bucket)
                outcome = "created"
            # The first write may have to allocate storage: prove it works before returning.
            client.put_object(Bucket=bucket, Key="_probe/ensure-bucket", Body=b"ok")
            client.delete_object(Bucket=bucket, Key="_probe/ensure-bucket")
            return outcome
        except Exception:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """``python -m openrath_project.s3config --ensure-bucket``: from the ``S3_*`` variables."""
    import argparse
    import os
    import sys

    parser = argparse.ArgumentParser(prog="python -m openrath_project.s3config")
    parser.add_argument("--ensure-bucket", action="store_true", required=True)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    try:
        outcome = ensure_bucket(
            endpoint_url=os.environ.get("S3_ENDPOINT_URL") or None,
            bucket=os.environ["S3_BUCKET"],
            access_key=secret_value("S3_ACCESS_KEY_ID") or os.environ["S3_ACCESS_KEY_ID"],
            secret_key=secret_value("S3_SECRET_ACCESS_KEY") or os.environ["S3_SECRET_ACCESS_KEY"],
            region=os.environ.get("S3_REGION") or "us-east-1",
            timeout=args.timeout,
        )
    except KeyError as exc:
        print(f"error: {exc.args[0]} is not set", file=sys.stderr)
        return 2
    except SecretFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"error: the bucket is not usable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"bucket {os.environ['S3_BUCKET']}: {outcome}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
