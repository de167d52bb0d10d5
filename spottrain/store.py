"""The embedded store: one SQLite file for profiles and for records of real runs.

Where: ``platformdirs.user_data_dir("spottrain")/spottrain.db``, or the path in the
environment variable ``SPOTTRAIN_STORE``, or an explicit ``path`` (the CLI's ``--store``).

Tables (``PRAGMA user_version`` holds :data:`STORE_SCHEMA_VERSION`):

- ``profiles``: one row per profile; the full profile JSON in ``json`` plus indexed columns
  (model, batch size, device, precision, samples/s, created_at) for listing.
- ``runs``: one row per training run (``run_id`` unique; plan and metadata as JSON; status).
- ``run_events``: time-stamped events of a run (start, checkpoint, revoke, throughput ...)
  with a JSON payload.
- ``measurements`` (schema 2): what a run measured, one row per steady-state world size, in the
  columns of the measurement table (:mod:`spottrain.perf.measurements`: model, batch size per
  GPU, cluster, ps, sync, throughput in samples/s ...) plus the run id, the step and all-reduce
  times and when it was written. :mod:`spottrain.perf.own_runs` reads them back for ``predict``,
  ``plan`` and ``converge``.
- ``loss_points`` (schema 3): a run's training-loss curve, one row per window of
  :data:`spottrain.runtime.api.LOSS_EVERY` steps (the chief's mean loss over the window, at its
  last step, the global batch it trained at, and the gradient's |G|^2 and tr(Sigma) where a
  group of two or more measured them). ``converge`` and ``plan --target-loss`` read
  them back as the run's loss curve (:func:`spottrain.perf.own_runs.own_curves`).

Opening an older store upgrades it in place, in one transaction that only adds tables: nothing
stored is rewritten or dropped. ``Store(path, read_only=True)`` neither creates nor upgrades a
file (read-only commands use it).

Every write is one transaction (``with conn:``), so an interrupted command (Ctrl-C) leaves
either the whole row or nothing. Several processes may write at once (busy timeout 30 s).

>>> import tempfile, os
>>> store = Store(os.path.join(tempfile.mkdtemp(), "s.db"))
>>> store.list_profiles()
[]
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spottrain.errors import InputError, SchemaVersionError, UnknownNameError
from spottrain.profiler.schema import Profile

STORE_SCHEMA_VERSION = 3
ENV_VAR = "SPOTTRAIN_STORE"

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS profiles (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    model TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    device_kind TEXT NOT NULL,
    device_name TEXT,
    precision TEXT,
    samples_per_s REAL NOT NULL,
    step_time_s REAL NOT NULL,
    schema_version INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS profiles_model ON profiles(model);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    status TEXT NOT NULL,
    plan_json TEXT,
    meta_json TEXT
);
CREATE TABLE IF NOT EXISTS run_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    time_s REAL NOT NULL,
    event TEXT NOT NULL,
    data_json TEXT
);
CREATE INDEX IF NOT EXISTS run_events_run ON run_events(run_id, time_s);
"""

# No foreign key to runs: a measurement outlives whatever happens to its run's record.
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    model TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    cluster TEXT NOT NULL,
    gpu TEXT NOT NULL,
    workers INTEGER NOT NULL,
    ps INTEGER NOT NULL,
    sync TEXT NOT NULL,
    throughput REAL NOT NULL,
    step_time_s REAL NOT NULL,
    sync_time_s REAL,
    steps INTEGER NOT NULL,
    warmup_steps INTEGER NOT NULL,
    network_gbps REAL,
    flops_per_sample REAL,
    param_count INTEGER,
    precision TEXT NOT NULL DEFAULT 'fp32',
    tensor_count INTEGER,
    source TEXT
);
CREATE INDEX IF NOT EXISTS measurements_model ON measurements(model);
"""

_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS loss_points (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    model TEXT NOT NULL,
    step INTEGER NOT NULL,
    loss REAL NOT NULL,
    global_batch_size INTEGER NOT NULL,
    workers INTEGER NOT NULL,
    grad_sqr REAL,
    grad_var REAL
);
CREATE INDEX IF NOT EXISTS loss_points_model ON loss_points(model);
"""

_MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3}
"""Schema version -> the statements that bring a store of the version before it up to it."""

MEASUREMENT_COLUMNS = ("model", "batch_size", "cluster", "gpu", "workers", "ps", "sync", "throughput", "step_time_s",
                       "sync_time_s", "steps", "warmup_steps", "network_gbps", "flops_per_sample", "param_count",
                       "precision", "tensor_count", "source")
"""Columns of a ``measurements`` row a writer gives (besides the run id and the time written)."""


def default_store_path() -> Path:
    """``$SPOTTRAIN_STORE`` if set, else ``spottrain.db`` in the user's data directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    # lazy: platformdirs only for the default store path
    from platformdirs import user_data_dir

    return Path(user_data_dir("spottrain", appauthor=False)) / "spottrain.db"


@dataclass(frozen=True, kw_only=True)
class ProfileRow:
    """A profile's summary line in the store."""

    id: int
    created_at: str
    model: str
    batch_size: int
    device_kind: str
    device_name: str | None
    precision: str | None
    samples_per_s: float
    step_time_s: float


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run_id: str
    created_at: str
    updated_at: str
    status: str
    plan: dict[str, Any] | None
    meta: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    run_id: str
    time_s: float
    event: str
    data: dict[str, Any] | None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Store:
    """SQLite store of profiles and run records; ``Store()`` opens the default location.

    ``read_only=True``: the file must exist; it is opened read-only, neither created nor
    upgraded (tables an older store lacks read as empty).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.read_only = read_only
        if self.path.exists() and self.path.is_dir():
            raise InputError("is a directory; --store expects a database file path", file=str(self.path))
        try:
            if read_only:
                if not self.path.is_file():
                    raise InputError("no store here (nothing has been recorded yet)", file=str(self.path))
                self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                                             isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"cannot open the store: {exc}", file=str(self.path)) from None
        self._conn.row_factory = sqlite3.Row
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise InputError(f"not a spottrain store (SQLite says: {exc})", file=str(self.path)) from None
        except SchemaVersionError:
            self._conn.close()
            raise

    # -- lifecycle

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        """The file's schema version (a read-only view of an older store keeps its own)."""
        return self._version

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise InputError("the store is open read-only", file=str(self.path))
        # BEGIN IMMEDIATE takes the write lock up front: no upgrade deadlocks between writers.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:  # KeyboardInterrupt too: nothing half-written stays
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > STORE_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store schema version {version} is newer than this spottrain understands ({STORE_SCHEMA_VERSION}); "
                "upgrade spottrain or use another --store",
                file=str(self.path),
            )
        if self.read_only:
            self._version = version
            return
        self._version = STORE_SCHEMA_VERSION
        if version < STORE_SCHEMA_VERSION:
            # One transaction for all the steps: a store is upgraded wholly or not at all. The
            # steps only create tables (IF NOT EXISTS), so a row stored before is never touched.
            with self._tx() as conn:
                for step in range(version + 1, STORE_SCHEMA_VERSION + 1):
                    # Statement by statement: executescript() would commit the open transaction.
                    for statement in filter(str.strip, _MIGRATIONS[step].split(";")):
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION}")

    def _has_table(self, name: str) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                  (name,)).fetchone() is not None

    # -- profiles

    def add_profile(self, profile: Profile) -> int:
        """Store a profile; returns its id."""
        dev = profile.device
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO profiles (created_at, model, batch_size, device_kind, device_name, precision, "
                "samples_per_s, step_time_s, schema_version, json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    profile.created_at or _now(),
                    profile.model,
                    profile.batch_size,
                    str(dev.get("kind", "")),
                    dev.get("name"),
                    profile.precision,
                    profile.samples_per_s,
                    profile.step_time_s,
                    profile.schema_version,
                    profile.to_json(indent=None),
                ),
            )
            return int(cur.lastrowid)

    def list_profiles(self, *, model: str | None = None) -> list[ProfileRow]:
        """Summaries, newest first; ``model`` filters by exact model name."""
        sql = "SELECT id, created_at, model, batch_size, device_kind, device_name, precision, samples_per_s, step_time_s FROM profiles"
        args: tuple[Any, ...] = ()
        if model is not None:
            sql += " WHERE model = ?"
            args = (model,)
        rows = self._conn.execute(sql + " ORDER BY id DESC", args).fetchall()
        return [ProfileRow(**dict(r)) for r in rows]

    def get_profile(self, key: int | str) -> Profile:
        """A profile by id, or the newest profile of a model name."""
        row = self._find(key)
        return Profile.from_dict(json.loads(row["json"]), source=f"{self.path} profile {row['id']}")

    def get_profile_json(self, key: int | str) -> dict[str, Any]:
        return json.loads(self._find(key)["json"])

    def _find(self, key: int | str) -> sqlite3.Row:
        if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
            row = self._conn.execute("SELECT id, json FROM profiles WHERE id = ?", (int(key),)).fetchone()
            if row is None:
                raise InputError(f"no profile with id {key} (see `spottrain profiles list`)", file=str(self.path))
            return row
        row = self._conn.execute("SELECT id, json FROM profiles WHERE model = ? ORDER BY id DESC LIMIT 1", (key,)).fetchone()
        if row is None:
            known = [r[0] for r in self._conn.execute("SELECT DISTINCT model FROM profiles")]
            raise UnknownNameError("profiled model", key, known)
        return row

    def remove_profiles(self, ids: list[int]) -> int:
        """Delete profiles by id (all or none); returns how many were removed."""
        with self._tx() as conn:
            missing = [i for i in ids if conn.execute("SELECT 1 FROM profiles WHERE id = ?", (i,)).fetchone() is None]
            if missing:
                raise InputError(f"no profile with id {', '.join(map(str, missing))}; nothing removed", file=str(self.path))
            for i in ids:
                conn.execute("DELETE FROM profiles WHERE id = ?", (i,))
        return len(ids)

    # -- runs

    def record_run(self, run_id: str, *, status: str, plan: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> None:
        """Create or update a run; a None ``plan``/``meta`` keeps the stored value."""
        now = _now()
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, created_at, updated_at, status, plan_json, meta_json) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET updated_at = excluded.updated_at, status = excluded.status, "
                "plan_json = COALESCE(excluded.plan_json, runs.plan_json), meta_json = COALESCE(excluded.meta_json, runs.meta_json)",
                (run_id, now, now, status, _dumps(plan), _dumps(meta)),
            )

    def record_event(self, run_id: str, event: str, *, time_s: float | None = None, data: dict[str, Any] | None = None) -> None:
        """Append an event to a run (the run is created with status 'running' if new)."""
        with self._tx() as conn:
            now = _now()
            conn.execute(
                "INSERT OR IGNORE INTO runs (run_id, created_at, updated_at, status) VALUES (?, ?, ?, 'running')",
                (run_id, now, now),
            )
            conn.execute(
                "INSERT INTO run_events (run_id, time_s, event, data_json) VALUES (?, ?, ?, ?)",
                (run_id, time.time() if time_s is None else float(time_s), event, _dumps(data)),
            )

    def get_run(self, run_id: str) -> RunRecord:
        row = self._conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise UnknownNameError("run", run_id, [r[0] for r in self._conn.execute("SELECT run_id FROM runs")])
        return RunRecord(
            run_id=row["run_id"], created_at=row["created_at"], updated_at=row["updated_at"], status=row["status"],
            plan=_loads(row["plan_json"]), meta=_loads(row["meta_json"]),
        )

    def list_runs(self) -> list[RunRecord]:
        ids = [r[0] for r in self._conn.execute("SELECT run_id FROM runs ORDER BY created_at DESC, run_id")]
        return [self.get_run(i) for i in ids]

    def remove_runs(self, run_ids: list[str]) -> int:
        """Delete runs by id with everything they left (events, measured rows, loss curve), all or
        none; returns how many were removed. Their rows stop informing ``predict``, ``plan`` and
        ``converge``."""
        with self._tx() as conn:
            missing = [r for r in run_ids if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (r,)).fetchone() is None]
            if missing:
                raise InputError(f"no run {', '.join(missing)} (see `spottrain runs list`); nothing removed",
                                 file=str(self.path))
            for r in run_ids:
                for table in ("run_events", "measurements", "loss_points", "runs"):
                    conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (r,))
        return len(run_ids)

    def events(self, run_id: str, *, event: str | None = None) -> list[RunEvent]:
        sql, args = "SELECT run_id, time_s, event, data_json FROM run_events WHERE run_id = ?", [run_id]
        if event is not None:
            sql += " AND event = ?"
            args.append(event)
        rows = self._conn.execute(sql + " ORDER BY time_s, id", args).fetchall()
        return [RunEvent(run_id=r[0], time_s=r[1], event=r[2], data=_loads(r[3])) for r in rows]


    # -- measurements of real runs

    def add_measurements(self, run_id: str, rows: list[dict[str, Any]]) -> list[int]:
        """Store a run's measured rows (keys: :data:`MEASUREMENT_COLUMNS`; missing optional
        ones are NULL) in one transaction; returns their ids."""
        for row in rows:
            unknown = set(row) - set(MEASUREMENT_COLUMNS)
            if unknown:
                raise InputError(f"unknown measurement column(s) {', '.join(sorted(unknown))}", file=str(self.path))
        cols = ", ".join(("run_id", "created_at", *MEASUREMENT_COLUMNS))
        marks = ", ".join("?" * (2 + len(MEASUREMENT_COLUMNS)))
        now = _now()
        ids = []
        with self._tx() as conn:
            for row in rows:
                values = [row.get(c) for c in MEASUREMENT_COLUMNS]
                values[MEASUREMENT_COLUMNS.index("precision")] = row.get("precision") or "fp32"
                cur = conn.execute(f"INSERT INTO measurements ({cols}) VALUES ({marks})", (run_id, now, *values))
                ids.append(int(cur.lastrowid))
        return ids

    def measurements(self, *, model: str | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
        """Stored measurement rows as dicts (``id``, ``run_id``, ``created_at`` and
        :data:`MEASUREMENT_COLUMNS`), oldest first; filtered by exact model name or run id.
        Values are what the file holds: readers validate them (:mod:`spottrain.perf.own_runs`)."""
        if not self._has_table("measurements"):  # a read-only view of a schema-1 store
            return []
        sql, args = "SELECT * FROM measurements", []
        where = [(c, v) for c, v in (("model", model), ("run_id", run_id)) if v is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
            args = [v for _, v in where]
        return [dict(r) for r in self._conn.execute(sql + " ORDER BY id", args).fetchall()]

    # -- loss curves of runs

    def add_loss_points(self, run_id: str, model: str, points: list[dict[str, Any]]) -> int:
        """Store a run's loss curve (keys ``step``, ``loss``, ``global_batch_size``, ``workers`` and,
        where measured, ``grad_sqr`` and ``grad_var``: |G|^2 and the per-sample tr(Sigma) of the
        gradient) in one transaction; returns how many points were written."""
        now = _now()
        with self._tx() as conn:
            conn.executemany(
                "INSERT INTO loss_points (run_id, created_at, model, step, loss, global_batch_size, workers, grad_sqr, "
                "grad_var) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, now, model, int(p["step"]), float(p["loss"]), int(p["global_batch_size"]), int(p["workers"]),
                  p.get("grad_sqr"), p.get("grad_var")) for p in points])
        return len(points)

    def loss_points(self, *, model: str | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
        """Stored loss points as dicts (``id``, ``run_id``, ``created_at``, ``model``, ``step``,
        ``loss``, ``global_batch_size``, ``workers``, ``grad_sqr``, ``grad_var``), oldest first; filtered by exact model name
        or run id. Values are what the file holds: readers validate them."""
        if not self._has_table("loss_points"):  # a read-only view of an older store
            return []
        sql, args = "SELECT * FROM loss_points", []
        where = [(c, v) for c, v in (("model", model), ("run_id", run_id)) if v is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
            args = [v for _, v in where]
        return [dict(r) for r in self._conn.execute(sql + " ORDER BY id", args).fetchall()]


def _dumps(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def open_store(path: str | os.PathLike[str] | None = None) -> Store:
    """Open (creating if needed) the store at ``path`` or the default location."""
    return Store(path)
