"""WebSocket streaming: authentication, connection limits and the base stream consumer.

The protocol is documented in ``docs/streaming.md``; the routes are in
:mod:`openrath_project.routing`; the hints come from :mod:`openrath_project.publisher`.
"""
