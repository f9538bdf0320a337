"""Models of this app (filled in by its issue)."""
