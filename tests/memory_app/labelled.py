"""The hand-labelled recall set (fixtures/recall_set.json) and BM25's expected answers.

``EXPECTED`` is the exact top-5 of each query over the 30 facts (fewer when fewer facts share a
term with the query). It was checked by hand against ``relevant``: every query's relevant facts
are its first results.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = json.loads((Path(__file__).parent / "fixtures" / "recall_set.json").read_text())
ENTRIES: dict[str, str] = {e["key"]: e["text"] for e in DATA["entries"]}
RELEVANT: dict[str, set[str]] = {q["query"]: set(q["relevant"]) for q in DATA["queries"]}

EXPECTED: dict[str, list[str]] = {
    "Does Dana prefer email or phone?": ["pref-email", "pref-dark-mode", "pref-timezone"],
    "When are Globex invoices due?": ["invoice-terms", "invoice-currency"],
    "What currency is Globex billed in?": ["invoice-currency", "invoice-terms"],
    "How do I roll back a bad helm release?": ["deploy-rollback", "db-migrations", "deploy-k8s"],
    "Is there a deployment freeze on Friday?": ["deploy-freeze", "support-hours"],
    "What caused the Redis outage in March?": ["incident-redis"],
    "API rate limit per token": ["api-ratelimit", "api-auth", "security-keys"],
    "Who is the escalation contact for on-call?": ["oncall", "pref-email", "pref-timezone"],
    "PostgreSQL backups: how long are they kept and how long does a restore take?": [
        "backup-restore",
        "db-postgres",
        "hiring",
        "style-tests",
    ],
    "Where are build artifacts stored?": ["vendor-s3"],
    "Who approves Stripe refunds?": ["vendor-stripe"],
    "SSO login with Okta": ["roadmap-q3", "sso"],
}
