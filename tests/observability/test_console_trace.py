"""The console's run page shows the run's trace id, linked to the operator's backend when
``OPENRATH_TRACE_URL_TEMPLATE`` is set."""

from __future__ import annotations

import re

from runs_app.models import Run

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def _trace_cell(html: str) -> str | None:
    found = re.search(r'<dd class="mono" id="run-trace">(.*?)</dd>', html)
    return found.group(1) if found else None


def test_the_run_page_shows_the_trace_and_links_it(login, waiting, settings):
    run, _ = waiting()
    client = login("operator")
    assert _trace_cell(client.get(f"/console/runs/{run.id}/").content.decode()) is None
    # The run as a traced process stored it (tracing is off in this test process).
    Run.objects.filter(id=run.id).update(trace_context={"traceparent": TRACEPARENT})
    settings.OPENRATH_TRACE_URL_TEMPLATE = ""
    assert _trace_cell(client.get(f"/console/runs/{run.id}/").content.decode()) == TRACE_ID
    settings.OPENRATH_TRACE_URL_TEMPLATE = "https://phoenix.example/redirects/traces/{trace_id}"
    assert _trace_cell(client.get(f"/console/runs/{run.id}/").content.decode()) == (
        f'<a href="https://phoenix.example/redirects/traces/{TRACE_ID}" '
        f'rel="noopener noreferrer" target="_blank">{TRACE_ID}</a>'
    )
