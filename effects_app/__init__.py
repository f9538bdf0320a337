"""The effect ledger and its review queue."""
