"""Retention: per-project policies (age, count) for sessions, runs, events, checkpoints and
artifacts, applied in bounded batches by the reconciler and by ``manage.py retention``.

What may go is decided over the project's lineage graph by the pure planner
(:mod:`retention_app.planning`): nothing that a kept object needs (an ancestor session, a branch
point, a fork parent, a replay source) and nothing still in flight (an active run, a pending
interrupt, an unresolved effect) is ever removed. Pruned checkpoint chains are compacted into
a keyframe so every kept checkpoint still rebuilds; artifacts no kept row references are swept
after a grace age. A dry run reports the same plan, with counts and bytes, changing nothing.
"""
