"""The SQLite store: profiles round-trip, runs and events, and it survives being killed."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from spottrain.errors import InputError, SchemaVersionError, UnknownNameError
from spottrain.profiler import profiler as prof
from spottrain.profiler.schema import Profile
from spottrain.store import STORE_SCHEMA_VERSION, Store, default_store_path


@pytest.fixture(scope="module")
def real_profile():
    return prof.profile_zoo("mlp-tiny", 8, iterations=3, warmup=1, loss_steps=3)


def test_real_profile_round_trips_through_the_store(tmp_path, real_profile):
    with Store(tmp_path / "s.db") as store:
        pid = store.add_profile(real_profile)
        assert store.get_profile(pid) == real_profile
        assert store.get_profile("mlp-tiny") == real_profile
        assert store.get_profile_json(pid) == json.loads(real_profile.to_json())
    # A new connection (another process, later) reads the same.
    with Store(tmp_path / "s.db") as store:
        rows = store.list_profiles()
        assert [r.id for r in rows] == [pid]
        assert rows[0].model == "mlp-tiny" and rows[0].batch_size == 8 and rows[0].device_kind == "cpu"


def test_list_filter_newest_first_and_rm(tmp_path, real_profile):
    from dataclasses import replace

    store = Store(tmp_path / "s.db")
    a = store.add_profile(real_profile)
    b = store.add_profile(replace(real_profile, model="other", batch_size=4))
    c = store.add_profile(replace(real_profile, batch_size=16))
    assert [r.id for r in store.list_profiles()] == [c, b, a]
    assert [r.id for r in store.list_profiles(model="mlp-tiny")] == [c, a]
    assert store.get_profile("mlp-tiny").batch_size == 16
    with pytest.raises(UnknownNameError, match="did you mean other"):
        store.get_profile("othr")
    with pytest.raises(InputError, match="no profile with id 99; nothing removed"):
        store.remove_profiles([a, 99])
    assert len(store.list_profiles()) == 3  # all or none
    assert store.remove_profiles([a, b]) == 2
    assert [r.id for r in store.list_profiles()] == [c]


def test_runs_and_events(tmp_path):
    store = Store(tmp_path / "s.db")
    store.record_event("job1", "start", time_s=10.0, data={"nodes": 4})
    store.record_event("job1", "throughput", time_s=20.0, data={"samples_per_s": 123.5})
    store.record_run("job1", status="done", plan={"cluster": "4xK80"})
    store.record_run("job1", status="done", meta={"exit": 0})  # keeps the plan
    run = store.get_run("job1")
    assert run.status == "done" and run.plan == {"cluster": "4xK80"} and run.meta == {"exit": 0}
    assert [e.event for e in store.events("job1")] == ["start", "throughput"]
    assert store.events("job1", event="throughput")[0].data["samples_per_s"] == 123.5
    with pytest.raises(UnknownNameError):
        store.get_run("job2")


def test_env_var_and_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTTRAIN_STORE", str(tmp_path / "env.db"))
    assert default_store_path() == tmp_path / "env.db"
    Store().close()
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("SPOTTRAIN_STORE")
    assert default_store_path().name == "spottrain.db"


def test_newer_store_version_and_garbage_file_are_refused(tmp_path):
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer"):
        Store(path)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(InputError, match="not a spottrain store"):
        Store(garbage)
    with pytest.raises(InputError, match="directory"):
        Store(tmp_path)


_WRITER = textwrap.dedent("""
    import json, sys
    from spottrain.profiler.schema import Profile
    from spottrain.store import Store
    data = json.loads(sys.argv[2])
    store = Store(sys.argv[1])
    i = 0
    while True:
        data["batch_size"] = i + 1
        store.add_profile(Profile.from_dict(data))
        store.record_event("r", "tick", data={"i": i})
        i += 1
        if i == 20:
            print("ready", flush=True)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_writer_leaves_store_consistent(tmp_path, real_profile, sig):
    path = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), real_profile.to_json(indent=None)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = Store(path)
    rows = store.list_profiles()
    assert len(rows) >= 20
    # Every row is whole, and rows are numbered without holes.
    sizes = sorted(store.get_profile(r.id).batch_size for r in rows)
    assert sizes == list(range(1, len(rows) + 1))
    assert isinstance(store.get_profile(rows[0].id), Profile)
    assert len(store.events("r")) in (len(rows) - 1, len(rows))


def _schema_1_store(path, real_profile) -> None:
    """A store as spottrain wrote it before the measurements table (schema 1), with data in it."""
    from spottrain.store import _SCHEMA_V1

    conn = sqlite3.connect(path)
    for statement in filter(str.strip, _SCHEMA_V1.split(";")):
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    with conn:
        conn.execute("INSERT INTO profiles (created_at, model, batch_size, device_kind, device_name, precision, "
                     "samples_per_s, step_time_s, schema_version, json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     ("2026-01-01T00:00:00+00:00", real_profile.model, real_profile.batch_size, "cpu", None, "fp32",
                      real_profile.samples_per_s, real_profile.step_time_s, real_profile.schema_version,
                      real_profile.to_json(indent=None)))
        conn.execute("INSERT INTO runs (run_id, created_at, updated_at, status, plan_json, meta_json) VALUES "
                     "('old-run', 'c', 'u', 'completed', '{\"nodes\": 4}', '{\"wall_s\": 12.5}')")
        conn.execute("INSERT INTO run_events (run_id, time_s, event, data_json) VALUES ('old-run', 5.0, 'start', '{\"workers\": 4}')")
    conn.close()


def _dump(path) -> dict:
    conn = sqlite3.connect(path)
    out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("profiles", "runs", "run_events")}
    conn.close()
    return out


def test_schema_1_store_is_upgraded_and_keeps_every_row(tmp_path, real_profile):
    path = tmp_path / "old.db"
    _schema_1_store(path, real_profile)
    before = _dump(path)
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION == 3
        assert store.get_profile("mlp-tiny") == real_profile
        assert store.get_run("old-run").meta == {"wall_s": 12.5}
        assert store.events("old-run")[0].data == {"workers": 4}
        assert store.measurements() == [] and store.loss_points() == []
        store.add_loss_points("new-run", "resnet50", [{"step": 10, "loss": 2.5, "global_batch_size": 256, "workers": 4}])
        store.add_measurements("new-run", [{"model": "resnet50", "batch_size": 64, "cluster": "1xV100:4", "gpu": "V100",
                                            "workers": 4, "ps": 0, "sync": "sync", "throughput": 900.0,
                                            "step_time_s": 256 / 900.0, "steps": 30, "warmup_steps": 3}])
    assert _dump(path) == before  # byte-for-byte the same rows
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()
    with Store(path) as store:  # opening again changes nothing
        (row,) = store.measurements()
        assert row["run_id"] == "new-run" and row["precision"] == "fp32" and row["sync_time_s"] is None
        (point,) = store.loss_points(model="resnet50")
        assert (point["run_id"], point["step"], point["loss"], point["global_batch_size"]) == ("new-run", 10, 2.5, 256)
        assert store.loss_points(model="vgg16") == []


def test_read_only_open_neither_creates_nor_upgrades(tmp_path, real_profile):
    path = tmp_path / "old.db"
    _schema_1_store(path, real_profile)
    with Store(path, read_only=True) as store:
        assert store.schema_version == 1 and store.measurements() == [] and store.loss_points() == []
        assert store.list_profiles()[0].model == "mlp-tiny"
        with pytest.raises(InputError, match="read-only"):
            store.record_event("r", "tick")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'measurements'").fetchone()[0] == 0
    conn.close()
    with pytest.raises(InputError, match="no store here"):
        Store(tmp_path / "none" / "s.db", read_only=True)
    assert not (tmp_path / "none").exists()


def test_an_interrupted_upgrade_leaves_the_old_store(tmp_path, real_profile, monkeypatch):
    import spottrain.store as st

    path = tmp_path / "old.db"
    _schema_1_store(path, real_profile)
    before = _dump(path)
    monkeypatch.setitem(st._MIGRATIONS, 2, st._SCHEMA_V2 + ";\nCREATE TABLE broken (")  # fails half-way
    with pytest.raises(InputError, match="not a spottrain store"):
        Store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'measurements'").fetchone()[0] == 0
    conn.close()
    assert _dump(path) == before
