"""Write a run's record (membership changes, checkpoints, lost steps, stalls, cost) to the
SQLite store (:mod:`spottrain.store`), so that real runs can refine the models."""

from __future__ import annotations

import logging
from typing import Any

from spottrain.runtime.summary import RunSummary

log = logging.getLogger(__name__)

# Controller events worth keeping in the store (per-step progress is not stored).
_KEEP = ("start", "spawn", "inject", "exit", "notice", "left", "joined", "membership", "decision", "finished", "stop")


def record_run(summary: RunSummary, events: list[dict[str, Any]], *, store_path: str | None = None,
               plan: dict[str, Any] | None = None, backend: str = "local") -> str | None:
    """Store the run; returns the store path, or ``None`` when it could not be written."""
    try:
        from spottrain.store import Store
    except ImportError:  # pragma: no cover - the store ships with spottrain
        return None
    try:
        with Store(store_path) as store:
            meta = summary.to_dict()
            meta["backend"] = backend
            store.record_run(summary.job_id, status="completed" if summary.ok else "failed", plan=plan, meta=meta)
            for ev in events:
                if ev.get("kind") in _KEEP:
                    data = {k: v for k, v in ev.items() if k not in ("t", "kind")}
                    store.record_event(summary.job_id, ev["kind"], time_s=ev.get("t"), data=data)
            for ck in summary.checkpoints:
                store.record_event(summary.job_id, "checkpoint", data=ck)
            return str(store.path)
    except Exception as exc:  # noqa: BLE001 - a record must never fail the run
        log.warning("could not write the run record: %s", exc)
        return None
