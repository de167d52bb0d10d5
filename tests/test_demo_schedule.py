"""Mapping one simulated run's revocations onto the local run's fault injections."""

from __future__ import annotations

from spottrain.demo_stages import revocation_schedule


def _replayed(revocations, notices=(), started_s=100.0, makespan_s=1100.0):
    # Hand-made timeline: no training until 100 s, then linear progress to 1000 samples at 1100 s.
    return {"started_s": started_s, "makespan_s": makespan_s,
            "timeline": {"samples_total": 1000.0, "progress": [[0.0, 0.0], [100.0, 0.0], [1100.0, 1000.0]],
                         "revocations": [list(r) for r in revocations], "notices": [list(n) for n in notices]}}


def test_revocations_land_at_the_same_share_of_progress():
    sched = revocation_schedule(_replayed([(350.0, "n2"), (850.0, "n0")]), workers=4, steps=200, cap=3)
    assert [e["at_step"] for e in sched] == [50, 150]  # 25% and 75% of the simulated training
    assert all(e["kind"] == "kill" for e in sched)
    assert [e["sim_node"] for e in sched] == ["n2", "n0"]


def test_a_noticed_node_gets_sigterm_at_the_notice():
    sched = revocation_schedule(_replayed([(600.0, "n1")], notices=[(480.0, "n1")]), workers=4, steps=100, cap=3)
    assert len(sched) == 1
    assert sched[0]["kind"] == "sigterm" and sched[0]["at_step"] == 38  # 380/1000 of the way


def test_revocations_outside_training_are_left_out_and_the_cap_holds():
    revs = [(50.0, "n0"), (200.0, "n1"), (300.0, "n2"), (400.0, "n3"), (500.0, "n4"), (1200.0, "n5")]
    sched = revocation_schedule(_replayed(revs), workers=4, steps=100, cap=3)
    assert [e["sim_node"] for e in sched] == ["n1", "n2", "n3"]  # n0 before training, n5 after the end


def test_slots_differ_and_steps_stay_inside_the_run():
    revs = [(100.5, "n7"), (100.6, "n7"), (1099.0, "n3")]
    sched = revocation_schedule(_replayed(revs), workers=4, steps=60, cap=3)
    slots = [e["worker"] for e in sched]
    assert len(set(slots)) == len(slots) and all(0 <= s < 4 for s in slots)
    assert all(3 <= e["at_step"] <= 55 for e in sched)
