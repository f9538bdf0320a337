"""A multi-host network test bed on one machine, for the network fault drills
(``tests/drills/netdrill.py``, ``deploy/bin/drill-net``).

* :class:`Netbed` — one network namespace per worker host (``ip netns`` + a veth pair; names
  start with ``ordr-``), each with its own address and loopback; the root namespace end of the
  link is the host's gateway, where everything the host may reach listens. nftables rules inside
  a host's namespace make partitions (both ways or one way) and random packet loss.
* :class:`FaultProxy` — a userspace TCP relay on each gateway (asyncio, a thread of its own) in
  front of PostgreSQL, Redis and the S3 server. The kernel here has no ``sch_netem`` (``tc qdisc
  ... netem`` answers "Specified qdisc kind is unknown" and there are no modules to load), so the
  relay stands in for it: latency with jitter per chunk (order kept), a black hole (sockets stay
  open, nothing is forwarded: the connection that hangs instead of failing), connections reset.
* :class:`EffectTarget` — the "outside world": a small HTTP service on every gateway that
  records each request with its idempotency key. ``once`` requests are applied every time they
  arrive (a non-idempotent effect), ``upsert`` requests are applied once per key (an idempotent
  effect whose target deduplicates).

Nothing leaves the machine: every address is on a veth link or 127.0.0.1. :meth:`Netbed.down`
removes what :meth:`Netbed.up` made, also after a failure half-way; :func:`sweep` removes
leftovers of an interrupted drill (names with the ``ordr-`` prefix).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "ordr-"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def missing_tools() -> str:
    """Why this machine cannot run the bed ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth links, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install {package})"
    return ""


#: One file per bed that is up, holding the pid of the process that made it.
OWNERS = Path(tempfile.gettempdir()) / "openrath-netbeds"


def _owner_alive(tag: str) -> bool:
    try:
        pid = int((OWNERS / tag).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def sweep(tag: str | None = None) -> list[str]:
    """Remove the namespaces and links of bed ``tag``, or (no tag) of every bed whose process
    is gone (an interrupted drill's): a bed another process still uses is left alone."""
    removed = []
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines()
        if len(line.split(":")) > 1
    ]
    namespaces = [
        line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line
    ]
    for name in [*namespaces, *links]:
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) : len(PREFIX) + 4]
        if (tag is None and not _owner_alive(owner)) or owner == tag:
            if name in namespaces:
                _ip("netns", "delete", name, check=False)
            else:
                _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


@dataclass
class Host:
    """One worker host: its namespace, its veth ends and addresses."""

    name: str
    index: int
    tag: str
    #: "10.A.B": host i's link is 10.A.B.(4i)/30, .(4i+1) the gateway, .(4i+2) the host.
    subnet: str

    @property
    def namespace(self) -> str:
        return f"{PREFIX}{self.tag}-{self.name}"

    @property
    def root_link(self) -> str:  # at most 15 characters (IFNAMSIZ)
        return f"{PREFIX}{self.tag}{self.index}"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.{4 * self.index + 1}"

    @property
    def address(self) -> str:
        return f"{self.subnet}.{4 * self.index + 2}"

    def exec_args(self, argv: list[str]) -> list[str]:
        """``argv`` inside the host's namespace, with the host's name as its hostname (a UTS
        namespace of its own), so worker names (``celery:<hostname>:...``) tell hosts apart."""
        script = 'hostname "$0" && exec "$@"'
        return [
            "ip", "netns", "exec", self.namespace, "unshare", "--uts", "--",
            "sh", "-c", script, self.name, *argv,
        ]  # fmt: skip


@dataclass
class Netbed:
    """Namespaces ``ordr-<tag>-<host>`` with veth links to the root namespace."""

    names: list[str]
    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    hosts: dict[str, Host] = field(default_factory=dict)

    def _free_subnet(self) -> str:
        """A 10.A.B.0/24 no interface of this machine uses (beds may run side by side)."""
        taken = _ip("-o", "-4", "addr", "show").stdout
        for _ in range(100):
            subnet = f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
            if f" {subnet}." not in taken:
                return subnet
        raise RuntimeError("no free 10.A.B.0/24 for the bed")

    def up(self) -> None:
        while _owner_alive(self.tag):
            self.tag = f"{random.randrange(16**4):04x}"
        subnet = self._free_subnet()
        OWNERS.mkdir(exist_ok=True)
        (OWNERS / self.tag).write_text(str(os.getpid()))
        try:
            for index, name in enumerate(self.names, start=1):
                host = Host(name, index, self.tag, subnet)
                self.hosts[name] = host
                peer = f"{host.root_link}p"
                _ip("netns", "add", host.namespace)
                _ip("link", "add", host.root_link, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", host.namespace)
                _ip("addr", "add", f"{host.gateway}/30", "dev", host.root_link)
                _ip("link", "set", host.root_link, "up")
                inside = ["ip", "-n", host.namespace]
                for args in (
                    ["link", "set", "lo", "up"],
                    ["link", "set", peer, "name", "eth0"],
                    ["addr", "add", f"{host.address}/30", "dev", "eth0"],
                    ["link", "set", "eth0", "up"],
                    ["route", "add", "default", "via", host.gateway],
                ):
                    subprocess.run([*inside, *args], check=True, capture_output=True, timeout=30)
                self._nft(host, _NFT_TABLE)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        for host in self.hosts.values():
            _ip("netns", "delete", host.namespace, check=False)
            _ip("link", "delete", host.root_link, check=False)
        self.hosts.clear()
        sweep(self.tag)  # a link or namespace made before a failure half-way
        (OWNERS / self.tag).unlink(missing_ok=True)

    # faults (nftables inside the host's namespace)

    def _nft(self, host: Host, script: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, "nft", "-f", "-"],
            input=script,
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def drop(self, host: str, port: int, *, direction: str = "both", percent: int = 100) -> None:
        """Drop packets between ``host`` and its gateway's ``port``: ``out`` (host -> service),
        ``in`` (service -> host) or ``both``; ``percent`` < 100 drops that share at random."""
        if direction not in {"both", "out", "in"}:
            raise ValueError(direction)
        h = self.hosts[host]
        sample = f"numgen random mod 100 < {percent} " if percent < 100 else ""
        rules = []
        if direction in {"both", "out"}:
            rules.append(
                f"add rule inet ordr output ip daddr {h.gateway} tcp dport {port} {sample}drop"
            )
        if direction in {"both", "in"}:
            rules.append(
                f"add rule inet ordr input ip saddr {h.gateway} tcp sport {port} {sample}drop"
            )
        self._nft(h, "\n".join(rules) + "\n")

    def heal(self, host: str) -> None:
        """Remove every drop rule of ``host``."""
        self._nft(self.hosts[host], "flush chain inet ordr input\nflush chain inet ordr output\n")

    def __enter__(self) -> Netbed:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


_NFT_TABLE = """\
table inet ordr {
  chain input { type filter hook input priority 0; policy accept; }
  chain output { type filter hook output priority 0; policy accept; }
}
"""


# --- The userspace fault relay ---------------------------------------------------------------


class Link:
    """One relayed listener (a host's view of one service) and the fault it is under."""

    def __init__(self, name: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.name = name
        self.listen = listen
        self.target = target
        #: "pass", "blackhole" (accept and hold, forward nothing) or "reset" (RST everything).
        self.mode = "pass"
        self.latency: tuple[float, float] | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a failed middlebox or a restarted host does."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """TCP relays on an event loop of their own; faults are switched from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, Link] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="fault-proxy", daemon=True
        )
        self.thread.start()

    def _call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add(self, name: str, listen: tuple[str, int], target: tuple[str, int]) -> Link:
        link = Link(name, listen, target)

        async def start() -> None:
            link.server = await asyncio.start_server(
                lambda r, w: self._serve(link, r, w), listen[0], listen[1], reuse_address=True
            )

        self._call(start())
        self.links[name] = link
        return link

    def set(
        self, name: str, *, mode: str = "pass", latency: tuple[float, float] | None = None
    ) -> None:
        """Put link ``name`` under a fault (``pass`` with no latency heals it)."""
        link = self.links[name]

        async def apply() -> None:
            link.mode, link.latency = mode, latency
            if mode == "reset":
                for writer in list(link.writers):
                    _abort(writer)

        self._call(apply())

    async def _serve(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if link.mode == "reset":
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*link.target)
        except OSError:
            _abort(writer)
            return
        link.writers.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._pump(link, reader, up_writer), self._pump(link, up_reader, writer)
            )
        finally:
            for w in (writer, up_writer):
                link.writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pump(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Copy one direction; latency is added per chunk, keeping the order (each chunk is
        due no earlier than the one before it)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while True:
                data = await reader.read(65536)
                while link.mode == "blackhole" and data:
                    await asyncio.sleep(0.05)  # hold it: the peer's socket stays open, silent
                if link.mode == "reset" or not data:
                    break
                delay = random.uniform(*link.latency) if link.latency else 0.0
                last_due = max(last_due, time.monotonic() + delay)
                queue.put_nowait((last_due, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(Exception):
                await sender
            with contextlib.suppress(Exception):
                if writer.can_write_eof():
                    writer.write_eof()

    def close(self) -> None:
        async def stop() -> None:
            for link in self.links.values():
                if link.server is not None:
                    link.server.close()
                for writer in list(link.writers):
                    _abort(writer)
            # connections cut by the cancellation below are not errors worth a traceback
            self.loop.set_exception_handler(lambda loop, context: None)
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(stop(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


# --- The effect target -----------------------------------------------------------------------


@dataclass
class TargetCall:
    """One request as the target saw it."""

    at: float
    source: str
    kind: str
    key: str
    run: str
    effect: str
    applied: bool


class EffectTarget:
    """An HTTP service on each gateway: ``POST /once`` applies every request, ``POST /upsert``
    applies the first request per idempotency key; both answer a receipt. ``hold`` in the body
    keeps the response that long after the apply (a slow remote system: the window in which a
    fault can strike between the effect and its record)."""

    def __init__(self, addresses: list[str], port: int) -> None:
        self.port = port
        self.calls: list[TargetCall] = []
        self.lock = threading.Lock()
        self.servers: list[ThreadingHTTPServer] = []
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                kind = self.path.strip("/")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key", "")
                if kind not in {"once", "upsert"} or not key:
                    self.send_response(400)
                    self.end_headers()
                    return
                with target.lock:
                    seen = any(c.key == key and c.applied for c in target.calls)
                    applied = kind == "once" or not seen
                    target.calls.append(
                        TargetCall(
                            time.time(), self.client_address[0], kind, key,
                            str(body.get("run", "")), str(body.get("effect", "")), applied,
                        )
                    )  # fmt: skip
                time.sleep(float(body.get("hold", 0)))
                reply = json.dumps({"receipt": key[:16], "applied": applied}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        for address in addresses:
            server = ThreadingHTTPServer((address, port), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def snapshot(self) -> list[TargetCall]:
        with self.lock:
            return list(self.calls)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def bed(names: list[str]) -> Iterator[Netbed]:
    """:class:`Netbed` as a context: removed on the way out, whatever happened."""
    netbed = Netbed(names)
    try:
        netbed.up()
        yield netbed
    finally:
        netbed.down()
