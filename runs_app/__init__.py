"""Durable runs: workflows, plans, runs, events, checkpoints, leases, interrupts, workers."""
