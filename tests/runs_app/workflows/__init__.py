"""Example workflow modules used by the runs_app tests (imported, never run here)."""
