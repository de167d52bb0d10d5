"""Many hosts, for real: every worker on its own Linux network namespace ("host"), reaching the
controller's store and liveness server over a veth link on a private bridge (addresses in
198.18.0.0/15, made and removed here). Faults a real network has: a link that goes down (no
FIN, no RST: silence) and the chief's host vanishing (link down, then everything on it killed),
in one job. The job finishes with no lost step; the namespaces are gone afterwards. The whole
fault matrix on 4 hosts (packet loss and delay included) is bench/runtime.py's.

Skips with the reason where namespaces cannot be made (not root, no `ip`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spottrain.runtime.faults import parse_injections  # noqa: E402
from spottrain.runtime.local import LocalJob, run_local  # noqa: E402
from spottrain.runtime.netns import Network, available, leftovers  # noqa: E402

OK, WHY = available()
pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(not OK, reason=f"no network namespaces here: {WHY}")]
HOSTS = 3


@pytest.fixture
def net():
    network = Network(hosts=HOSTS)
    try:
        yield network
    finally:
        tag = network.tag
        network.close()
        assert leftovers(tag) == [], "namespaces or links left behind"


def _job(tmp: Path, net: Network, inject: str, *, steps: int = 60) -> LocalJob:
    ck = tmp / "ck"
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(ck), "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": "10",
           "SPOTTRAIN_EXAMPLE_SLEEP_S": "0.05"}
    return LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", "mlp"], workers=HOSTS,
                    run_dir=tmp / "run", job_id="netns", env=env, injections=parse_injections(inject, workers=HOSTS),
                    steps=steps, checkpoint_dir=ck, replacement_delay_s=0.5, timeout_s=200, hosts=net.hosts,
                    network=net, controller_address=net.address, liveness_timeout_s=2.0)


def test_a_silent_worker_and_the_chiefs_host_vanishing(tmp_path: Path, net: Network) -> None:
    """Host 1's link goes down (silence: no FIN, no RST), later the chief's host vanishes. Both
    losses are found by the liveness timeout, replacements start on fresh hosts, nothing is
    lost. The cut-off worker cannot be reached by the controller (it cannot kill it): hearing
    nothing from its controller for 3 s, it stops by itself, so no orphan is left on a
    partitioned host. (Packet loss and delay, which lose nothing and only slow the job down,
    are rows of bench/runtime.py's fault matrix.)"""
    events: list[dict] = []
    job = _job(tmp_path, net, "linkdown:1@step10,vanish:chief@step25", steps=120)
    job.env["SPOTTRAIN_CONTROLLER_GRACE_S"] = "3"
    s = run_local(job, on_event=lambda kind, data: events.append(data) if kind != "progress" else None)
    assert s.ok, s.failure
    assert s.completed_steps == 120
    lost = [r for r in s.recoveries if r["how"] == "lost"]
    # both silent losses were found by the liveness timeout, not by a process exit
    assert len(lost) == 2, s.recoveries
    assert all(r["recovery_s"] is not None and r["recovery_s"] < 10.0 for r in lost), lost
    assert s.lost_steps == 0
    # replacements of a host that is gone run on a fresh host (a new machine)
    assert any(e["kind"] == "host" for e in events)
    spawned = [e["host"] for e in events if e["kind"] == "spawn"]
    assert len(set(spawned)) > HOSTS
    # the workers ran on their hosts: each in its own network namespace
    assert all(h is not None for h in spawned)
    cut = [ln for ln in (job.run_dir / "events-w1.jsonl").read_text().splitlines() if '"stopped"' in ln]
    assert cut, "the cut-off worker did not stop by itself"
    assert net.hosts[1].pids() == []


def test_an_impairment_replaces_the_one_in_place() -> None:
    """The soak's random faults hit the same host twice: loss after a delay (a root qdisc of
    another kind) or after a loss (its classes exist) once failed the tc command and ended the
    controller. Each new impairment replaces the last; clearing leaves the default qdisc."""
    import subprocess

    with Network(hosts=1) as network:
        host = network.hosts[0]

        def root_qdisc() -> str:
            out = subprocess.run(["tc", "qdisc", "show", "dev", host.link], capture_output=True, text=True).stdout
            return out.split()[1] if out.split() else ""

        for kind in ("delay", "loss", "loss", "delay", "loss"):
            applied = network.impair(host, kind)
            want = "netem" if applied.startswith("netem") else ("tbf" if kind == "delay" else "htb")
            assert root_qdisc() == want, (kind, applied)
        network.clear_impairment(host)
        assert root_qdisc() not in ("tbf", "htb", "netem")
        tag = network.tag
    assert leftovers(tag) == []
