"""Schedules: durable cron and fixed-interval rows that start runs of a workflow in a project.

The reconciler fires them (:func:`schedules_app.services.fire_due`): each tick at most once,
guaranteed by a unique (schedule, tick) row written in the same transaction as the run, with a
declared catch-up policy after downtime and an overlap policy while the previous run is active.
The time arithmetic (cron via ``cronsim``, intervals, time zones, catch-up) is plain Python in
:mod:`schedules_app.timing`.
"""
