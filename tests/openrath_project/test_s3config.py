"""The S3 client configuration (``openrath_project.s3config``): the attempts it is given are
the attempts botocore makes, each bounded by the read timeout, against a connection that hangs
(an endpoint that accepts and never answers, as the network drill's S3 black hole does)."""

from __future__ import annotations

import socket
import threading

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError

from openrath_project.s3config import s3_client_config


class Blackhole:
    """A TCP listener on 127.0.0.1 that accepts every connection, reads, and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_a_hung_endpoint_gets_exactly_the_configured_attempts(attempts: int) -> None:
    hole = Blackhole()
    try:
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{hole.port}",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            region_name="us-east-1",
            config=s3_client_config(connect_timeout=2, read_timeout=0.3, max_attempts=attempts),
        )
        assert client.meta.config.retries == {"total_max_attempts": attempts, "mode": "standard"}
        with pytest.raises(ReadTimeoutError):
            client.head_object(Bucket="b", Key="k")
        # each attempt timed out on its own connection: one connection per attempt, no more
        assert hole.accepted == attempts
    finally:
        hole.close()


def test_at_least_one_attempt() -> None:
    assert s3_client_config(max_attempts=0).retries == {
        "total_max_attempts": 1,
        "mode": "standard",
    }
