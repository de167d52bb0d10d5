"""The controller's side of the membership keys (the worker's side is
:mod:`spottrain.runtime.elastic`, where every key is described).

Both controllers, the local backend's (:mod:`spottrain.runtime.local`) and the fleet's
(:mod:`spottrain.runtime.fleet`), publish generations and checkpoint requests through this one
implementation. torch-free: the store is passed in.
"""

from __future__ import annotations

import json
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

    def request_checkpoint(self) -> None:
        """Every member checkpoints at the next step boundary (they agree on the step)."""
        self.ckpt_requests += 1
        self._set_ctl()

    def _set_ctl(self) -> None:
        self.store.set("ctl", json.dumps({"gen": self.gen, "ckpt": self.ckpt_requests}))
