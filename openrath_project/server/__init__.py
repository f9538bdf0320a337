"""The shell's Django app: the process-level commands and the wiring of the core's ports.

Commands: ``serve``, ``quickstart``, ``run_worker``, ``openrath_migrate`` and ``openapi`` (the
operator commands about tenants, projects, users and tokens stay in ``openrath_project.tenancy``).
When Django starts, :class:`~openrath_project.server.apps.ServerConfig` installs what the lower
layers call through ports (:mod:`openrath_project.server.ports`). See docs/architecture.md,
"Core and shell".
"""
