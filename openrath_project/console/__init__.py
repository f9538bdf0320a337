"""The operator console: Django templates over the same selectors and services as the API.

Pages (``/console/``): overview, approvals queue, effects review queue, runs with their timeline
and plan graph, sessions with live chunks, the lineage graph. Every view resolves the console
user's principal (their membership role in the tenant chosen in the switcher) and calls the
scoped selectors and the services, exactly like the API; the audit middleware records every
action. ``admin_scope`` holds the shared base of the Django admin's model admins.
"""
