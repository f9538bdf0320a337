"""An incremental Server-Sent Events decoder (the WHATWG event-stream format), fed line by line.

Pure Python: the sync and the async client feed it the lines of a streamed response.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its ``event`` name (``message`` when unnamed), its ``data`` (the
    ``data`` lines joined by newlines) and the stream's last event id as of this event."""

    event: str
    data: str
    id: str | None
    #: The reconnection delay the server asked for (ms), if it sent one so far.
    retry: int | None = None


class EventStreamDecoder:
    """Feed it lines (without their line ending); it returns an event when a blank line ends
    one. Comments (``: keep-alive``) and fields it does not know are ignored, as the format
    says; ``last_event_id`` persists across events like a browser's ``EventSource`` keeps it."""

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = last_event_id
        self.retry: int | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> ServerSentEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self.last_event_id, self.retry)
