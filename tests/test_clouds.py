"""The cloud facts every layer reads (spottrain/clouds.py): the measured start-up, used alike."""

import pytest

from spottrain.clouds import VM_STARTUP_S, vm_startup_s
from spottrain.planner import risk
from spottrain.transience.availability import startup_times_s


def test_vm_startup_is_the_mean_of_cmdare_measured_starts():
    measured = startup_times_s(preemptible=True)
    assert len(measured) == 45
    assert VM_STARTUP_S == pytest.approx(float(measured.mean()), abs=0.5)


def test_planner_and_simulator_boot_a_vm_in_the_same_time():
    assert risk.LAUNCH_S == VM_STARTUP_S + risk.JOB_SETUP_S
    assert {vm_startup_s(c) for c in ("aws", "gcp", "azure")} == {VM_STARTUP_S}
