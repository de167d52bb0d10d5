"""The controller's side of the membership keys (the worker's side is
:mod:`spottrain.runtime.elastic`, where every key is described).

Both controllers, the local backend's (:mod:`spottrain.runtime.local`) and the fleet's
(:mod:`spottrain.runtime.fleet`), publish generations and checkpoint requests through this one
implementation. torch-free: the store is passed in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class MembershipPublisher:
    """Publishes membership generations and the ``ctl`` key.

    A controller class mixes this in and provides ``store`` (the c10d TCPStore it hosts),
    ``liveness`` (its :class:`~spottrain.runtime.liveness.LivenessServer`) and ``record(kind,
    **data)``; ``gen``, ``members`` and ``ckpt_requests`` are kept here.
    """

    store: Any
    liveness: Any
    gen: int = -1
    members: list[str]
    ckpt_requests: int = 0

    def record(self, kind: str, **data: Any) -> None:  # pragma: no cover - provided by the controller
        raise NotImplementedError

    def reports(self) -> list[dict[str, Any]]:
        """The workers' reports (:meth:`~spottrain.runtime.elastic.ElasticClient.report`) in the
        order they were made; one not yet written (a worker cut off between count and value) is
        skipped."""
        out = []
        for n in range(1, int(self.store.add("reports", 0)) + 1):
            key = f"report/{n}"
            if self.store.check([key]):
                out.append(json.loads(self.store.get(key)))
        return out

    def publish(self, members: list[str], *, abort: bool = False) -> None:
        """Generation ``gen + 1`` is ``members`` (rank = position)."""
        self.gen += 1
        self.members = members
        self.store.set(f"gen/{self.gen}/members", json.dumps(members))
        self.store.set("gen", json.dumps(self.gen))
        self._set_ctl()
        # Pushed down the heartbeat connections too: survivors hung in a collective with a lost
        # member abandon it at once (abort), instead of waiting for the collective's timeout.
        self.liveness.broadcast({"gen": self.gen, "abort": abort})
        self.record("membership", gen=self.gen, members=list(members), world=len(members))

    def check_regroup(self, alive: Callable[[str], bool]) -> bool:
        """A member whose collective failed while no member was lost (a send or receive that
        timed out on a lossy link, a reset connection) posts ``regroup/<gen>``: the members still
        alive form a new generation (``abort``: the others abandon the old group's collective at
        once). Returns whether a new generation was published."""
        if self.gen < 0 or not self.store.check([f"regroup/{self.gen}"]):
            return False
        key = f"regroup/{self.gen}"
        try:
            info = json.loads(self.store.get(key))
        except (ValueError, TypeError):
            info = {}
        self.store.delete_key(key)
        self.record("regroup", gen=self.gen, worker=info.get("worker"), step=info.get("step"),
                    reason=info.get("reason"))
        members = [m for m in self.members if alive(m)]
        if not members:
            return False
        self.publish(members, abort=True)
        return True

    def request_checkpoint(self) -> None:
        """Every member checkpoints at the next step boundary (they agree on the step)."""
        self.ckpt_requests += 1
        self._set_ctl()

    def _set_ctl(self) -> None:
        self.store.set("ctl", json.dumps({"gen": self.gen, "ckpt": self.ckpt_requests}))
