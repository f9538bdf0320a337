"""Memory API: DRF views and serializers (thin callers of memory_app.services)."""
