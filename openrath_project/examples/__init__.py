"""Runnable examples, from a one-agent hello to a durable multi-agent run (docs/examples.md).

Each module runs offline on the ``scripted`` provider (``python -m
openrath_project.examples.<name>``) against the configured database (the embedded SQLite file by
default) and returns a small result dict from ``main()``, which the test suite checks.
"""
