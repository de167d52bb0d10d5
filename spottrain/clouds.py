"""Facts about the clouds that several layers use, each written once with its source.

The planner, the simulator and the transience models read these numbers from here, so they
cannot drift apart. The module sits at the bottom of the layers (it imports nothing), so every
layer may use it without loading another.
"""

from __future__ import annotations

GCP_PREEMPTIBLE_CAP_S = 24 * 3600.0
"""GCP stops every preemptible VM after 24 h (GCP's preemptible VM documentation; the shipped
transient-dl lifetimes end there, see spottrain/data/traces/transient-dl/SOURCE.md)."""

VM_STARTUP_S = 87.0
"""Seconds from asking for a GPU VM to a booted one (provisioning + staging + booting): the mean
of CM-DARE's 45 measured starts of preemptible GCE K80 / P100 VMs, 87.3 s
(spottrain/data/traces/cmdare/SOURCE.md; :func:`spottrain.transience.availability.startup_times_s`
reads them, a test recomputes this value). The only start-up times shipped, so every cloud
uses them: the planner's launch time and the simulator's boot of a node when no fitted
replacement delay is asked for."""

REGROUP_S = 30.0
"""Seconds a synchronous group stalls to re-form when a member leaves or joins while the others
hold the model (spotDNN's measured throughput dip at a revocation, 29.6 s: detecting the loss and
re-forming the group). spottrain's runtime re-forms at every membership change, a revoked node's
and its replacement's, and a joiner takes the model from a peer: no checkpoint is written or read
(:meth:`spottrain.runtime.api.Trainer._exchange_state`). The planner charges it twice per
revocation (twice per outage that takes a whole group), the simulator once per change."""


def vm_startup_s(cloud: str) -> float:
    """VM start-up (s) on ``cloud`` when no fitted replacement delay is asked for: the measured
    :data:`VM_STARTUP_S`, the same on every cloud (the only start-up times shipped)."""
    return VM_STARTUP_S


PREEMPTION_NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
"""Preemption notice per cloud (AWS two-minute warning, GCP/Azure 30 s)."""
