"""The session side of "append under a run's fence", as SQL pieces other statements compose.

The session app owns what an append does to its tables: the session row's lengths and usage
totals go up, the chunks are inserted after the old end, and only the session's writer (a run's
lease: run id and fencing token) may do it. A run's step commit on PostgreSQL is one statement
(runs_app.services composes its run, checkpoint and event parts with these); a plain append
(``services.append_now``) and the portable fallback use the same SET list and owner predicates.

Named parameters of the pieces: ``%(run)s`` and ``%(token)s`` (the writer), ``%(n)s`` (how many
chunks), ``%(prompt)s``/``%(completion)s``/``%(total)s``/``%(cost)s`` (their usage) and
``%(chunks)s`` (:func:`chunk_records`); :func:`append_params` builds all but the writer.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from psycopg.types.numeric import Int8

from sessions_app.chunk_rules import ChunkDraft, usage_totals
from sessions_app.models import Chunk, Session

SESSION = Session._meta.db_table
CHUNK = Chunk._meta.db_table

#: What an append of ``n`` chunks adds to the session row (one list, every append path).
USAGE_SET = """own_len = own_len + {n},
        usage_prompt_tokens = usage_prompt_tokens + {prompt},
        usage_completion_tokens = usage_completion_tokens + {completion},
        usage_total_tokens = usage_total_tokens + {total},
        usage_cost_usd = usage_cost_usd + {cost}"""

#: A fenced writer appends only while the session is owned by exactly its lease; anyone else
#: only while no run owns it. A worker whose lease went stale is refused even after the run
#: released the session.
OWNER_FENCE = "writer_run_id = {run} AND writer_token = {fence}"
OWNER_FREE = "writer_run_id IS NULL"

#: Who may take the writer: the session is free, or already this run's with an older token.
WRITER_FREE_OR_OLDER = (
    "({table}.writer_run_id IS NULL OR ({table}.writer_run_id = {run} "
    "AND {table}.writer_token <= {fence}))"
)


def claim_writer_cte(source: str) -> str:
    """The body of a CTE that makes the run in ``source`` (columns ``id``, ``fencing_token``,
    ``session_id``) its session's writer; it returns the session's ``length`` (no row: another
    run, or a newer lease of this one, holds the writer)."""
    free_or_older = WRITER_FREE_OR_OLDER.format(
        table="session", run=f"{source}.id", fence=f"{source}.fencing_token"
    )
    return f"""
    UPDATE {SESSION} AS session
    SET writer_run_id = {source}.id, writer_token = {source}.fencing_token
    FROM {source}
    WHERE session.id = {source}.session_id AND {free_or_older}
    RETURNING session.base_len + session.own_len AS length"""  # noqa: S608 - names from metadata


def append_ctes(source: str, *, release: bool = False) -> str:
    """Two CTEs, ``s`` (the session row after the append: ``id``, ``tenant_id``, ``new_len``)
    and ``ch`` (the inserted chunks' ``seq``), appending ``%(n)s`` chunks to the session named
    by ``source.session_id`` under the writer ``%(run)s``/``%(token)s``. ``release`` also gives
    the writer up (the run ends). Without chunks the session row is touched only to release."""
    usage = USAGE_SET.format(
        n="%(n)s",
        prompt="%(prompt)s",
        completion="%(completion)s",
        total="%(total)s",
        cost="%(cost)s",
    )
    owner = OWNER_FENCE.format(run="%(run)s", fence="%(token)s")
    releasing = "writer_run_id = NULL, writer_token = NULL," if release else ""
    only_with_chunks = "" if release else "AND %(n)s > 0"
    return f"""s AS (
    UPDATE {SESSION}
    SET {usage},
        {releasing}
        updated_at = now()
    FROM {source}
    WHERE {SESSION}.id = {source}.session_id {only_with_chunks} AND {owner}
    RETURNING {SESSION}.id AS id, {SESSION}.tenant_id AS tenant_id,
              {SESSION}.base_len + {SESSION}.own_len AS new_len
), ch AS (
    INSERT INTO {CHUNK}
        (tenant_id, session_id, seq, role, kind, content, agent, workflow, run_id, step,
         tool_call_id, usage, trust, branch, created_at)
    SELECT s.tenant_id, s.id, s.new_len - %(n)s + v.ord, v.role, v.kind, v.content, v.agent,
           COALESCE(v.workflow, ''), v.run_id, v.step, v.tool_call_id, v.usage, v.trust,
           v.branch, now()
    FROM s, jsonb_to_recordset(%(chunks)s::jsonb) AS v(
        ord int, role text, kind text, content jsonb, agent text, workflow text, run_id uuid,
        step text, tool_call_id text, usage jsonb, trust text, branch text)
    RETURNING seq
)"""  # noqa: S608 - table names from model metadata, values are parameters


def fenced_length(source: str) -> str:
    """SQL for the session length a run's step commit records, for a statement whose run row is
    the CTE ``source`` (its ``session_len`` the length the run expects after the append) and
    whose append is ``append_ctes``' ``s``: without chunks the run's; with chunks the append's
    own ``RETURNING`` (the writer check and the length in one read of the session row), and only
    when it ends where the run expects. Otherwise NULL, which the checkpoint's NOT NULL
    ``session_len`` refuses, so the whole statement writes nothing (:func:`unfenced_append`)."""
    return (
        f"CASE WHEN %(n)s = 0 THEN {source}.session_len "  # noqa: S608 - names, no values
        f"ELSE (SELECT s.new_len FROM s WHERE s.new_len = {source}.session_len) END"
    )


def unfenced_append(exc: BaseException, table: str) -> bool:
    """Whether ``exc`` (Django's wrapper of a psycopg error) is the refusal of
    :func:`fenced_length`: a NULL ``session_len`` inserted into ``table``, because the session's
    writer was not the committing lease or its append did not end where the run expected."""
    diag = getattr(exc.__cause__, "diag", None)
    return (
        diag is not None
        and diag.sqlstate == "23502"  # not_null_violation
        and diag.table_name == table
        and diag.column_name == "session_len"
    )


def current_length(source: str) -> str:
    """SQL for the stored length of ``source``'s session (0 without one)."""
    return (
        f"COALESCE((SELECT ls.base_len + ls.own_len FROM {SESSION} ls "  # noqa: S608
        f"WHERE ls.id = {source}.session_id), 0)"
    )


def chunk_records(drafts: list[ChunkDraft]) -> str:
    """The drafts as the JSON array ``append_ctes`` reads with ``jsonb_to_recordset``."""
    return json.dumps(
        [
            {
                "ord": i,
                "role": d.role,
                "kind": d.kind,
                "content": d.content,
                "agent": d.agent,
                "workflow": d.workflow,
                "run_id": d.run_id,
                "step": d.step,
                "tool_call_id": d.tool_call_id,
                "usage": d.usage,
                "trust": d.trust,
                "branch": d.branch,
            }
            for i, d in enumerate(drafts)
        ]
    )


def append_params(drafts: list[ChunkDraft]) -> dict[str, Any]:
    """The append's parameters but the writer's. Integers go as int8 whatever their size:
    psycopg would otherwise pick int2/int4/int8 by value, and every new combination of types
    would be a new prepared statement."""
    totals = usage_totals(drafts)
    return {
        "n": Int8(len(drafts)),
        "prompt": Int8(int(totals["prompt_tokens"])),
        "completion": Int8(int(totals["completion_tokens"])),
        "total": Int8(int(totals["total_tokens"])),
        "cost": Decimal(str(totals["cost_usd"])),
        "chunks": chunk_records(drafts),
    }
