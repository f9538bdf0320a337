"""Adapt a stdio MCP server's tools into :class:`FlowToolCall` objects.

``mcp_tools(["python", "server.py"])`` starts the server, lists its tools and returns an
``MCPToolset``: iterate it for the tools, ``close()`` it (or use ``with``) to stop the server.
The MCP client is asynchronous; it runs on an event loop in a background thread and every tool
call is a synchronous, time-limited request to it, so agents stay plain synchronous code.

Failures become tool errors, never hangs: a call that outlives ``call_timeout`` raises
:class:`MCPToolTimeout` (a ``TimeoutError``, reported as ``tool_timeout``), a server that dies
makes every call raise :class:`MCPServerExited` with its exit code, and a tool result flagged
``isError`` raises :class:`MCPToolError` with the server's message.

The server runs in its own process group with only a minimal environment (``HOME``, ``PATH``,
``USER``, ... plus ``env=``), so the server process does not inherit the worker's secrets
unless they are passed explicitly. Closing follows the MCP shutdown sequence: close stdin,
wait, then SIGTERM and SIGKILL the process group; the server is always reaped.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import math
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import mcp_types
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from sessions_app.sandbox.local import group_members
from sessions_app.tools.base import FlowToolCall

logger = logging.getLogger(__name__)

#: How long the server gets to exit by itself after its stdin closes.
EXIT_GRACE_SECONDS = 2.0
#: SIGTERM to SIGKILL.
KILL_GRACE_SECONDS = 2.0
#: After the connection closed, how long to wait for the server's exit status (it is normally
#: there within milliseconds; a loaded machine may take longer to reap the process).
EXIT_STATUS_WAIT_SECONDS = 5.0
_STDERR_TAIL_CHARS = 2_000


class MCPServerError(Exception):
    """Base of the errors an MCP toolset reports."""


class MCPStartupError(MCPServerError):
    """The server could not be started, did not answer in time, or its tool list is unusable."""


class MCPServerExited(MCPServerError):
    """The server process is gone; calls cannot be answered."""


class MCPToolTimeout(MCPServerError, TimeoutError):
    """A tool call got no answer within the call timeout."""


class MCPToolError(MCPServerError):
    """The server answered the call with an error."""


class _ServerProcess:
    """A stdio transport that, unlike the SDK's, keeps the process so its exit code is known."""

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: str | None) -> None:
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.process: Process | None = None
        self.stderr_tail: deque[str] = deque(maxlen=64)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def stderr_excerpt(self) -> str:
        text = "".join(self.stderr_tail).strip()
        return text[-_STDERR_TAIL_CHARS:]

    @asynccontextmanager
    async def connect(
        self,
    ) -> AsyncIterator[tuple[Any, Any]]:
        process = await anyio.open_process(
            self.command,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.process = process
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def pump_stdout() -> None:
            assert process.stdout is not None
            buffer = ""
            with contextlib.suppress(
                anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream
            ):
                async with read_writer:
                    async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                        lines = (buffer + chunk).split("\n")
                        buffer = lines.pop()
                        for line in lines:
                            if line.strip():
                                await read_writer.send(_parse_message(line))

        async def pump_stdin() -> None:
            assert process.stdin is not None
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async with write_reader:
                    async for message in write_reader:
                        payload = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send((payload + "\n").encode())
            # The server stopped reading: make pending requests fail instead of hang.
            await read_writer.aclose()

        stderr_done = anyio.Event()

        async def pump_stderr() -> None:
            assert process.stderr is not None
            try:
                with contextlib.suppress(
                    anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream
                ):
                    async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                        self.stderr_tail.append(chunk)
            finally:
                stderr_done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump_stdout)
            group.start_soon(pump_stdin)
            group.start_soon(pump_stderr)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await self._shutdown(process, stderr_done)
                    for stream in (read_stream, write_stream, read_writer, write_reader):
                        await stream.aclose()
                group.cancel_scope.cancel()

    async def _shutdown(self, process: Process, stderr_done: anyio.Event) -> None:
        """Close stdin, give the server time to exit, then kill its whole process group."""
        if process.stdin is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        if not await _wait_exit(process, EXIT_GRACE_SECONDS):
            await terminate_posix_process_tree(process, KILL_GRACE_SECONDS)
            if not await _wait_exit(process, 2.0):
                logger.warning("MCP server %d survived SIGKILL; abandoning it", process.pid)
        elif group_members(process.pid):
            # The server exited but left processes in its group: they go too. (The group id
            # cannot be reused while it has members, so this cannot hit an unrelated group.)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        # Its last words (a start-up error, say) are worth having before the pipe closes.
        with anyio.move_on_after(0.5):
            await stderr_done.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await pipe.aclose()


def _parse_message(line: str) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        logger.warning("MCP server sent a line that is not JSON-RPC: %.200s", line)
        return exc
    return SessionMessage(message)


async def _wait_exit(process: Process, seconds: float) -> bool:
    """Poll the exit status (``wait()`` would also wait for pipes a grandchild may hold)."""
    with anyio.move_on_after(seconds):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return process.returncode is not None


def _result_output(result: mcp_types.CallToolResult) -> Any:
    """Structured content when the server gives it, else the text (or content list)."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content or []
    if all(isinstance(block, mcp_types.TextContent) for block in blocks):
        texts = [block.text for block in blocks if isinstance(block, mcp_types.TextContent)]
        return texts[0] if len(texts) == 1 else texts
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def _error_text(result: mcp_types.CallToolResult) -> str:
    texts = [
        block.text for block in result.content or [] if isinstance(block, mcp_types.TextContent)
    ]
    return " ".join(texts).strip() or "the MCP tool reported an error without a message"


class MCPTool(FlowToolCall):
    """One tool of an MCP server; calling it sends ``tools/call`` and waits for the answer."""

    def __init__(self, toolset: MCPToolset, spec: mcp_types.Tool) -> None:
        self.toolset = toolset
        self.name = spec.name
        self.description = spec.description or spec.title or ""
        self.parameters = dict(spec.input_schema or {"type": "object"})
        annotations = spec.annotations
        # Unknown effects are treated as writes so the effect ledger wraps them.
        self.writes = not (annotations is not None and annotations.read_only_hint is True)

    def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
        return self.toolset.call(self.name, arguments)


_open_toolsets: set[MCPToolset] = set()
_open_toolsets_lock = threading.Lock()


@atexit.register
def _close_open_toolsets() -> None:
    """Stop servers a program forgot to close (the loop thread is a daemon and would just die)."""
    with _open_toolsets_lock:
        toolsets = list(_open_toolsets)
    for toolset in toolsets:
        with contextlib.suppress(Exception):
            toolset.close()


class MCPToolset:
    """The tools of one running MCP server. Iterable; ``close()`` (or ``with``) stops it."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        startup_timeout: float = 10,
        call_timeout: float = 30,
    ) -> None:
        if not command or not all(isinstance(part, str) for part in command):
            raise ValueError("command must be a non-empty list of strings")
        self.command = list(command)
        self.call_timeout = call_timeout
        self._server = _ServerProcess(
            self.command,
            env=get_default_environment() | (env or {}),
            cwd=str(Path(cwd)) if cwd is not None else None,
        )
        self._client: Client | None = None
        self._tools: list[MCPTool] = []
        self._closed = False
        self._close_lock = threading.Lock()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"mcp:{Path(self.command[0]).name}", daemon=True
        )
        self._thread.start()
        with _open_toolsets_lock:
            _open_toolsets.add(self)
        # Created here, not in the loop, so close() always has it (3.10+ events bind lazily).
        self._stop = asyncio.Event()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(startup_timeout), self._loop)
        try:
            # The margin lets the loop's own deadline fire first and say what failed.
            self._ready.result(timeout=startup_timeout + 5)
        except concurrent.futures.TimeoutError:
            self.close()
            raise MCPStartupError(
                f"MCP server {self._label()} did not start within {startup_timeout}s"
            ) from None
        except BaseException:
            self.close()
            raise

    # -- lifecycle ------------------------------------------------------------------------------

    def _label(self) -> str:
        return " ".join(self.command)[:200]

    async def _serve(self, startup_timeout: float) -> None:
        """Own the client for its whole life: connect, list tools, wait for close, disconnect."""
        try:
            # The deadline covers start-up only; the scope wraps everything so that the
            # client's task groups nest inside it, as anyio requires.
            with anyio.CancelScope(deadline=anyio.current_time() + startup_timeout) as scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(Client(self._server.connect()))
                    tools = await self._list_tools(client)
                    scope.deadline = math.inf
                    self._client = client
                    self._tools = [MCPTool(self, spec) for spec in tools]
                    self._ready.set_result(None)
                    await self._stop.wait()
            if scope.cancelled_caught and not self._ready.done():
                raise MCPStartupError(
                    f"MCP server {self._label()} did not start within {startup_timeout}s"
                    + self._stderr_note()
                )
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(await self._startup_error(exc))
            elif not isinstance(exc, Exception):
                raise
            else:
                logger.warning("MCP server %s: client stopped with %r", self._label(), exc)
        finally:
            self._client = None

    async def _startup_error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, MCPStartupError | KeyboardInterrupt | SystemExit):
            return exc
        if isinstance(exc, OSError) and self._server.process is None:
            return MCPStartupError(f"cannot start MCP server {self._label()}: {exc}")
        # The closed connection can be noticed a moment before the exit status.
        code = await _wait_exit_code(self._server, EXIT_STATUS_WAIT_SECONDS)
        if code is not None:
            return MCPStartupError(
                f"MCP server {self._label()} exited with exit code {code} during startup"
                + self._stderr_note()
            )
        return MCPStartupError(
            f"MCP server {self._label()} failed during startup: {type(exc).__name__}: {exc}"
            + self._stderr_note()
        )

    def _stderr_note(self) -> str:
        excerpt = self._server.stderr_excerpt()
        return f"; stderr: {excerpt[-500:]}" if excerpt else ""

    @staticmethod
    async def _list_tools(client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a server paginating forever must not hang startup
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def close(self) -> None:
        """Stop the server and the background loop; safe to call twice."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        with _open_toolsets_lock:
            _open_toolsets.discard(self)
        self._loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(BaseException):
            # Bounded: stdin close grace + SIGTERM grace + SIGKILL reap, plus slack.
            self._main.result(timeout=EXIT_GRACE_SECONDS + KILL_GRACE_SECONDS + 6)
        if not self._main.done():
            self._loop.call_soon_threadsafe(self._main.cancel)
            with contextlib.suppress(BaseException):
                self._main.result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> MCPToolset:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- tools ----------------------------------------------------------------------------------

    @property
    def tools(self) -> list[MCPTool]:
        return list(self._tools)

    @property
    def pid(self) -> int | None:
        """The server's process id (its process group id too)."""
        process = self._server.process
        return process.pid if process is not None else None

    def __iter__(self) -> Iterator[MCPTool]:
        return iter(list(self._tools))

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<MCPToolset {self._label()!r} {state} tools={[t.name for t in self._tools]}>"

    def _exited_error(self) -> MCPServerExited:
        # No stderr excerpt here: it mostly holds logs of earlier, unrelated calls.
        return MCPServerExited(
            f"the MCP server {self._label()} exited with exit code {self._server.returncode}"
        )

    def call(self, name: str, arguments: dict[str, Any], *, raw: bool = False) -> Any:
        """Call a tool synchronously; raises the errors described in the module docstring.

        With ``raw=True`` the SDK's ``CallToolResult`` is returned as the server sent it, an
        ``isError`` result included (OpenRath's adapter shapes it for the model itself)."""
        if self._closed:
            raise MCPServerError(f"the MCP toolset for {self._label()} is closed")
        if self._server.returncode is not None:
            raise self._exited_error()
        future = asyncio.run_coroutine_threadsafe(self._call(name, arguments, raw=raw), self._loop)
        try:
            # The margin lets the loop's own timeout (and exit-status wait) fire first.
            return future.result(timeout=self.call_timeout + EXIT_STATUS_WAIT_SECONDS + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MCPToolTimeout(
                f"MCP tool {name!r} did not answer within {self.call_timeout}s"
            ) from None

    async def _call(self, name: str, arguments: dict[str, Any], *, raw: bool = False) -> Any:
        client = self._client
        if client is None:
            raise (
                self._exited_error()
                if self._server.returncode is not None
                else MCPServerError(f"the MCP server {self._label()} is not connected")
            )
        try:
            with anyio.fail_after(self.call_timeout):
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            if self._server.returncode is not None:
                raise self._exited_error() from None
            raise MCPToolTimeout(
                f"MCP tool {name!r} did not answer within {self.call_timeout}s"
            ) from None
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            # A dead server shows up as a closed connection; its exit code says more. An error
            # answer (any other code) comes from a live server: no need to wait for an exit.
            closed = not isinstance(exc, MCPError) or exc.code == mcp_types.CONNECTION_CLOSED
            wait = EXIT_STATUS_WAIT_SECONDS if closed else 0.0
            if await _wait_exit_code(self._server, wait) is not None:
                raise self._exited_error() from None
            raise MCPToolError(f"MCP tool {name!r} failed: {exc}") from None
        if raw:
            return result
        if result.is_error:
            raise MCPToolError(f"MCP tool {name!r} failed: {_error_text(result)}")
        return _result_output(result)


async def _wait_exit_code(server: _ServerProcess, seconds: float) -> int | None:
    process = server.process
    if process is None:
        return None
    await _wait_exit(process, seconds)
    return process.returncode


def mcp_tools(
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    startup_timeout: float = 10,
    call_timeout: float = 30,
) -> MCPToolset:
    """Start a stdio MCP server and return its tools as an :class:`MCPToolset`."""
    return MCPToolset(
        command, env=env, cwd=cwd, startup_timeout=startup_timeout, call_timeout=call_timeout
    )
