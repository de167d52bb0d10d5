"""Liveness: a heartbeat connection between every worker and the controller, both ways.

Each worker keeps one TCP connection to the controller's liveness server and sends a line
every ``interval_s``; the server answers on every connection at the same period. That gives
three signals, none of which reads an error message:

- **Process death** (``kill -9``, a crash, an OOM kill): the worker's kernel closes the
  connection, the server reads end-of-file at once, whichever host the worker is on.
- **Silence** (``SIGSTOP``, a link that went down, a host that vanished without FIN/RST): no
  line from the worker for ``deadline_s``; the controller declares it lost.
- **Controller loss** (the launcher killed, its host gone): a worker hears nothing for
  ``grace_s`` (or cannot reconnect within it), or its reconnects are refused for ``refused_s``
  (the controller's host is up and nothing listens any more: the controller process is gone),
  and stops: it exits within a bounded time, so no worker outlives its controller.

The server also pushes messages down the connections: a new membership generation (with
``abort`` when a member of the current group was lost, so that survivors hung in a collective
with the lost member abandon it at once), ``release`` (leave at the next step boundary),
``stop`` (checkpoint and exit: the launcher is shutting down) and ``fence`` (you were declared
lost: exit now). Messages are JSON lines.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ENV_LIVENESS = "SPOTTRAIN_LIVENESS"
"""``host:port`` of the controller's liveness server (set by the controller for its workers)."""
DEFAULT_INTERVAL_S = 0.5
DEFAULT_DEADLINE_S = 3.0
"""A worker silent this long is declared lost (``spottrain run --liveness-timeout``)."""
DEFAULT_GRACE_S = 10.0
"""A worker that hears nothing from its controller this long exits."""
DEFAULT_REFUSED_S = 2.0
"""A worker whose reconnects to the controller are refused this long exits."""


@dataclass
class _Peer:
    wid: str
    sock: socket.socket
    last_seen: float
    pid: int | None = None
    closed: bool = False
    bye: str | None = None
    buf: bytes = b""


@dataclass
class LivenessServer:
    """The controller's side: accepts worker connections, tracks when each was last heard."""

    host: str = "127.0.0.1"
    port: int = 0
    interval_s: float = DEFAULT_INTERVAL_S
    peers: dict[str, _Peer] = field(default_factory=dict)
    fenced: set[str] = field(default_factory=set)
    stopping: str | None = None
    """Set by :meth:`stop`: the reason every worker, connected now or later, is told to stop."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._listener = socket.create_server((self.host, self.port), backlog=128, reuse_port=False)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spottrain-liveness", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------ queries (controller thread)
    def status(self, wid: str) -> tuple[str, float] | None:
        """``("closed" | "bye" | "open", seconds since last heard)``, or None if never connected."""
        with self._lock:
            p = self.peers.get(wid)
            if p is None:
                return None
            state = "bye" if p.bye is not None else ("closed" if p.closed else "open")
            return state, time.monotonic() - p.last_seen

    def send(self, wid: str, msg: dict[str, Any]) -> bool:
        with self._lock:
            p = self.peers.get(wid)
            if p is None or p.closed:
                return False
            return self._send(p, msg)

    def broadcast(self, msg: dict[str, Any], wids: list[str] | None = None) -> None:
        with self._lock:
            for p in list(self.peers.values()):
                if not p.closed and (wids is None or p.wid in wids):
                    self._send(p, msg)

    def stop(self, reason: str) -> None:
        """Tell every worker to stop, now and on any later connection: a worker still starting
        (importing, loading its data) when the controller stops connects after this broadcast,
        and would otherwise train on until it is killed."""
        with self._lock:
            self.stopping = reason  # from here on, a worker that connects hears it at its handshake
        self.broadcast({"stop": reason})

    def fence(self, wid: str, reason: str) -> None:
        """Tell ``wid`` it is no longer a member (it exits on reading this), now and on any reconnect."""
        with self._lock:
            self.fenced.add(wid)
            p = self.peers.get(wid)
            if p is not None and not p.closed:
                self._send(p, {"fence": reason})
                self._close(p)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            for p in self.peers.values():
                self._close(p)
        self._sel.close()
        self._listener.close()

    # ------------------------------------------------------------ the server thread
    def _send(self, p: _Peer, msg: dict[str, Any]) -> bool:
        try:
            p.sock.sendall((json.dumps(msg) + "\n").encode())
            return True
        except (BlockingIOError, InterruptedError):
            return False  # the peer's buffer is full: it is not reading (stopped or cut off)
        except OSError:
            self._close(p)
            return False

    def _close(self, p: _Peer) -> None:
        if not p.closed:
            p.closed = True
            try:
                self._sel.unregister(p.sock)
            except (KeyError, ValueError):
                pass
            p.sock.close()

    def _loop(self) -> None:
        next_beat = time.monotonic()
        pending: dict[socket.socket, bytes] = {}
        while not self._stop.is_set():
            timeout = max(0.0, next_beat - time.monotonic())
            for key, _ in self._sel.select(timeout=min(timeout, 0.1)):
                if key.data is None:
                    try:
                        conn, _addr = self._listener.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    with self._lock:
                        self._sel.register(conn, selectors.EVENT_READ, "new")
                    pending[conn] = b""
                    continue
                sock = key.fileobj
                try:
                    data = sock.recv(65536)  # type: ignore[union-attr]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                with self._lock:
                    if key.data == "new":
                        self._handshake(sock, data, pending)  # type: ignore[arg-type]
                    else:
                        p = key.data
                        if not data:
                            self._close(p)
                            continue
                        p.last_seen = time.monotonic()
                        p.buf += data
                        *lines, p.buf = p.buf.split(b"\n")
                        for line in lines:
                            msg = _decode(line)
                            if msg and "bye" in msg:
                                p.bye = str(msg["bye"])
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.interval_s
                with self._lock:
                    for p in list(self.peers.values()):
                        if not p.closed:
                            self._send(p, {"hb": 1})

    def _handshake(self, sock: socket.socket, data: bytes, pending: dict[socket.socket, bytes]) -> None:
        if not data:
            pending.pop(sock, None)
            self._sel.unregister(sock)
            sock.close()
            return
        buf = pending.get(sock, b"") + data
        if b"\n" not in buf:
            pending[sock] = buf
            return
        pending.pop(sock, None)
        line, rest = buf.split(b"\n", 1)
        hello = _decode(line) or {}
        wid = str(hello.get("hello", ""))
        self._sel.unregister(sock)
        if not wid or wid in self.fenced:
            try:
                sock.sendall((json.dumps({"fence": "declared lost by the controller"}) + "\n").encode())
            except OSError:
                pass
            sock.close()
            return
        old = self.peers.get(wid)
        if old is not None:
            self._close(old)
        p = _Peer(wid=wid, sock=sock, last_seen=time.monotonic(), pid=hello.get("pid"), buf=rest)
        self.peers[wid] = p
        self._sel.register(sock, selectors.EVENT_READ, p)
        if self.stopping is not None:
            self._send(p, {"stop": self.stopping})


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return msg if isinstance(msg, dict) else None


class Heartbeat:
    """The worker's side: a daemon thread that beats, reads the controller's messages and calls
    ``on_message(msg)`` for each, and ``on_lost()`` once when the controller has been silent (or
    unreachable) for ``grace_s``."""

    def __init__(self, endpoint: str, wid: str, *, on_message: Callable[[dict[str, Any]], None],
                 on_lost: Callable[[], None], interval_s: float = DEFAULT_INTERVAL_S,
                 grace_s: float = DEFAULT_GRACE_S, refused_s: float = DEFAULT_REFUSED_S) -> None:
        host, port = endpoint.rsplit(":", 1)
        self.addr = (host, int(port))
        self.wid = wid
        self.on_message = on_message
        self.on_lost = on_lost
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.refused_s = refused_s
        self._refused_since: float | None = None
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.last_heard = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="spottrain-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        _wake_on_parent_death()
        self._connect()
        self._thread.start()
        return self

    def socket_inode(self) -> int | None:
        s = self._sock
        return os.fstat(s.fileno()).st_ino if s is not None else None

    def bye(self, reason: str) -> None:
        """Say this worker is leaving on purpose (done, left): its disconnect is not a loss."""
        self._stop.set()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.sendall((json.dumps({"bye": reason}) + "\n").encode())
                except OSError:
                    pass

    def _connect(self) -> bool:
        try:
            sock = socket.create_connection(self.addr, timeout=min(self.grace_s, 2.0))
        except ConnectionRefusedError:
            self._refused_since = self._refused_since or time.monotonic()
            return False
        except OSError:
            return False
        self._refused_since = None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall((json.dumps({"hello": self.wid, "pid": os.getpid()}) + "\n").encode())
        except OSError:
            sock.close()
            return False
        sock.settimeout(self.interval_s)
        with self._lock:
            old, self._sock = self._sock, sock
        if old is not None:
            old.close()
        self.last_heard = time.monotonic()
        return True

    def _loop(self) -> None:
        buf = b""
        next_beat = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            refused = self._refused_since is not None and now - self._refused_since > self.refused_s
            if now - self.last_heard > self.grace_s or refused:
                self.on_lost()
                return
            sock = self._sock
            if sock is None:
                if not self._connect():
                    self._stop.wait(min(self.interval_s, 0.2))
                buf = b""
                continue
            if now >= next_beat:
                next_beat = now + self.interval_s
                try:
                    sock.sendall(b'{"hb":1}\n')
                except OSError:
                    self._drop(sock)
                    continue
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                self._drop(sock)
                continue
            if not data:
                self._drop(sock)
                continue
            self.last_heard = time.monotonic()
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                msg = _decode(line)
                if msg and "hb" not in msg:
                    self.on_message(msg)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            if self._sock is sock:
                self._sock = None
        sock.close()


def _wake_on_parent_death() -> None:
    """Ask Linux to send this process SIGCONT when its parent (the launcher, where it started
    the worker itself) dies: a worker that is stopped (SIGSTOP) when its controller goes away
    wakes up, finds the controller gone and exits, instead of staying behind stopped. A running
    worker ignores SIGCONT. Best effort: nothing happens elsewhere."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGCONT), 0, 0, 0)
    except (OSError, AttributeError):
        pass
