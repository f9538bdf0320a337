"""Query strings that could carry credentials never reach a log line: the product's own handler
and the web servers' access and error loggers redact them (the served case is in
``test_body_limit.py``: uvicorn's real access line)."""

from __future__ import annotations

import io
import logging

import pytest

from openrath_project.jsonlog import (
    REDACTED,
    SERVER_LOGGERS,
    ContextFilter,
    JsonFormatter,
    install_log_redaction,
    redact_query_strings,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ws/sessions/1/?token=ort_abc_def", f"/ws/sessions/1/?token={REDACTED}"),
        ("/x?after=3&access_token=a%2Fb&limit=5", f"/x?after=3&access_token={REDACTED}&limit=5"),
        ("/x?key=k;password=p#top", f"/x?key={REDACTED};password={REDACTED}#top"),
        ("/x?client_secret=s&Signature=sig", f"/x?client_secret={REDACTED}&Signature={REDACTED}"),
        (
            "/a.bin?X-Amz-Credential=AKIA&X-Amz-Signature=ff&X-Amz-Expires=60",
            f"/a.bin?X-Amz-Credential={REDACTED}&X-Amz-Signature={REDACTED}&X-Amz-Expires=60",
        ),
        ("/x?API_KEY=1", f"/x?API_KEY={REDACTED}"),
        ("/x?after=3&limit=5&project=alpha", "/x?after=3&limit=5&project=alpha"),
        ("/x?token=", "/x?token="),
        ("no query string here", "no query string here"),
        ('"GET /x?auth=abc HTTP/1.1" 200', f'"GET /x?auth={REDACTED} HTTP/1.1" 200'),
    ],
)
def test_credential_like_query_parameters_are_redacted(text, expected):
    assert redact_query_strings(text) == expected


def test_the_product_handler_redacts_arguments_and_messages():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("openrath.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("fetching %s for %s", "/a?signature=s3cr3t&page=2", "someone")
        logger.warning("literal /b?password=hunter2")
        logger.warning("as mapping %(url)s", {"url": "/c?token=t0k3n"})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    text = stream.getvalue()
    for secret in ("s3cr3t", "hunter2", "t0k3n"):
        assert secret not in text
    assert f"/a?signature={REDACTED}&page=2 for someone" in text
    assert f"/b?password={REDACTED}" in text
    assert f"/c?token={REDACTED}" in text


def test_the_server_loggers_redact_before_any_handler(caplog):
    install_log_redaction()
    install_log_redaction()  # idempotent: one filter per logger
    for name in SERVER_LOGGERS:
        assert len(logging.getLogger(name).filters) == 1, name
    access = logging.getLogger("uvicorn.access")
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        access.info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/healthz?token=abc", "1.1", 200
        )
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        logging.getLogger("uvicorn.error").info(
            '%s - "WebSocket %s" %s', "127.0.0.1:5000", "/ws/runs/1/?access_token=xyz", "[accepted]"
        )
    with caplog.at_level(logging.INFO, logger="gunicorn.access"):
        logging.getLogger("gunicorn.access").info("%(r)s %(s)s", {"r": "GET /x?key=k", "s": "200"})
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f'127.0.0.1:5000 - "GET /healthz?token={REDACTED} HTTP/1.1" 200',
        f'127.0.0.1:5000 - "WebSocket /ws/runs/1/?access_token={REDACTED}" [accepted]',
        f"GET /x?key={REDACTED} 200",
    ]
