"""OpenRath on Django: settings, URLs, entry points, the `flow` facade and tenancy."""
