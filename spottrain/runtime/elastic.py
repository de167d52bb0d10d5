"""The worker side of elastic membership, on a c10d TCPStore hosted by the launcher.

Why not torchrun's restart loop: with torch 2.x, the c10d rendezvous shares one TCPStore
server (in the agent) across restarts, and restarted workers attach to it *without* a
per-attempt prefix (``TORCHELASTIC_USE_AGENT_STORE``). Gloo's full-mesh bootstrap then reads
the dead attempt's peer addresses under the same default-group keys and fails with
"Connection refused" in ``connectFullMesh`` on every restart. See docs/run.md.

Here the long-lived launcher (the controller) owns the store, so no worker's death - the
chief's included - takes it down, and every membership *generation* ``g`` gets its own key
space ``gen/<g>/pg`` (a PrefixStore), so nothing of an older group is ever read again. Keys:

- ``gen``: the newest generation number; ``gen/<g>/members``: JSON list of worker ids
  (rank = position); ``ctl``: JSON ``{"gen": g, "ckpt": n}`` read once per step;
- ``ready/<wid>``: a worker is up; ``notice/<wid>`` / ``decision/<wid>``: a preemption
  notice and the policy's answer; ``left/<wid>``: a worker left at a step boundary;
  ``progress``: the last completed step (rank 0).
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist

ENV_RDZV = "SPOTTRAIN_RDZV"
ENV_WORKER_ID = "SPOTTRAIN_WORKER_ID"
EXIT_LEFT = 83
"""Exit code of a worker that left gracefully after a preemption notice (or a release)."""
EXIT_FENCED = 85
"""Exit code of a worker that was declared lost by the controller, or lost its controller."""
EXIT_STOPPED = 86
"""Exit code of a worker that checkpointed and exited because the controller stopped the job."""
EXIT_INPUT = 87
"""Exit code of a worker that failed on the user's input (a :class:`~spottrain.errors.SpottrainError`:
a bad setting, a checkpoint it must not or cannot resume from). Not a revocation: the
launcher stops the job at once with the worker's one-line message; nothing is replaced."""


class WaitCancelled(Exception):
    """A membership wait given up because the worker is stopping (:attr:`ElasticClient.cancelled`)."""


class ElasticClient:
    """A worker's handle on the controller's store."""

    def __init__(self, endpoint: str, worker_id: str, *, timeout_s: float = 30.0) -> None:
        host, port = endpoint.rsplit(":", 1)
        self.worker_id = worker_id
        self.store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s),
                                   wait_for_workers=False)
        self.cancelled: Callable[[], bool] = lambda: False
        """Asked while waiting for a generation: true gives the wait up (:class:`WaitCancelled`)."""

    @classmethod
    def from_env(cls) -> "ElasticClient | None":
        endpoint = os.environ.get(ENV_RDZV)
        if not endpoint:
            return None
        return cls(endpoint, os.environ.get(ENV_WORKER_ID, f"pid{os.getpid()}"))

    def set(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value))

    def get_nowait(self, key: str) -> Any | None:
        if not self.store.check([key]):
            return None
        return json.loads(self.store.get(key))

    def report(self, value: Any) -> None:
        """Append ``value`` to the controller's reports (``reports`` counts them, ``report/<n>``
        holds the n-th): :meth:`MembershipPublisher.reports` reads them back."""
        n = self.store.add("reports", 1)
        self.set(f"report/{n}", value)

    def register(self) -> None:
        self.set(f"ready/{self.worker_id}", time.time())

    def control(self) -> dict[str, int]:
        return self.get_nowait("ctl") or {"gen": -1, "ckpt": 0}

    def wait_generation(self, after: int, *, timeout_s: float) -> tuple[int, list[str]]:
        """Block until a generation newer than ``after`` includes this worker."""
        deadline = time.monotonic() + timeout_s
        while True:
            gen = self.get_nowait("gen")
            if gen is not None and gen > after:
                members = json.loads(self.store.get(f"gen/{gen}/members"))
                if self.worker_id in members:
                    return int(gen), members
            self._check_cancelled()
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {self.worker_id}: no new membership generation after {after} "
                                   f"within {timeout_s:.0f}s")
            time.sleep(0.02)

    def arrive(self, gen: int, members: list[str], *, timeout_s: float) -> tuple[int, list[str]]:
        """Wait until every member of generation ``gen`` has arrived to form it; move on to a newer
        generation that includes this worker as soon as one is published. Returns the generation
        all members reached. A member that never arrives (it died or left while the generation
        was published) makes this raise :class:`TimeoutError` after posting ``formfail/<gen>``:
        the controller then publishes the members that did arrive."""
        deadline = time.monotonic() + timeout_s
        self.set(f"gen/{gen}/arrived/{self.worker_id}", time.time())
        while True:
            missing = [m for m in members if not self.store.check([f"gen/{gen}/arrived/{m}"])]
            if not missing:
                return gen, members
            if not self.store.check([f"ready/{m}" for m in missing]):
                # a member still starting up (imports take seconds) is not late: the controller
                # bounds start-up separately
                deadline = max(deadline, time.monotonic() + timeout_s)
            newest = self.get_nowait("gen")
            if newest is not None and int(newest) > gen:
                newer = json.loads(self.store.get(f"gen/{int(newest)}/members"))
                if self.worker_id in newer:
                    gen, members = int(newest), newer
                    deadline = time.monotonic() + timeout_s
                    self.set(f"gen/{gen}/arrived/{self.worker_id}", time.time())
                    continue
            self._check_cancelled()
            if time.monotonic() > deadline:
                self.set(f"formfail/{gen}", self.worker_id)
                raise TimeoutError(f"worker {self.worker_id}: generation {gen} incomplete after {timeout_s:.0f}s "
                                   f"(missing {', '.join(missing)})")
            time.sleep(0.02)

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise WaitCancelled(f"worker {self.worker_id}: stopping")

    def group_store(self, gen: int) -> dist.Store:
        return dist.PrefixStore(f"gen/{gen}/pg", self.store)

    def report_error(self, exc: BaseException) -> None:
        """Tell the controller this worker failed in its own code (the job fails; no replacement);
        ``input``: on the user's input, ``message``: the error's first line."""
        from spottrain.errors import SpottrainError

        try:
            self.set(f"error/{self.worker_id}", {"type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                                                 "input": isinstance(exc, SpottrainError),
                                                 "message": error_line(exc)})
        except Exception:  # noqa: BLE001 - the controller may be gone; the exit code still tells
            pass


def error_line(exc: BaseException) -> str:
    """An error's message on one line (at most 500 characters)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def socket_inodes() -> set[int]:
    """Inodes of this process's open sockets (from ``/proc/self/fd``)."""
    out: set[int] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def cut_sockets(inodes: set[int]) -> int:
    """Shut down (both directions) this process's TCP sockets whose inode is in ``inodes``.

    This is how a survivor abandons a collective hung on a silent peer: gloo's pending
    receive on that connection fails at once ("connection closed"), the collective raises, and
    the worker re-forms. Closing the descriptor is left to the process group's own teardown.
    Returns how many sockets were shut down.
    """
    n = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for name in names:
        fd = int(name)
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
            if not link.startswith("socket:[") or int(link[8:-1]) not in inodes:
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            # connected streams only: shutting gloo's listening socket down aborts the process
            if sock.type == socket.SOCK_STREAM and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0:
                sock.getpeername()
                sock.shutdown(socket.SHUT_RDWR)
                n += 1
        except OSError:
            pass
        finally:
            sock.close()
    return n
