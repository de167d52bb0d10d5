"""A worker whose group bootstrap failed forms the next group under the name its peers use.

torch names the default process group after a process-wide counter that only a successful
``destroy_process_group`` resets; a failed ``init_process_group`` leaves it raised, and the
worker then waited for other store keys than its peers' forever (``gen/<g>/pg/4/...`` against
``.../pg/0/...``; the 30-minute soak stalled on it). Here a real bootstrap fails (a peer that never
comes), then the same process forms a group as ``Trainer._form`` does.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from spottrain.runtime.api import _reset_group_counter  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_the_next_group_after_a_failed_bootstrap_has_the_fresh_name() -> None:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    with pytest.raises(Exception):  # world of 2, the other rank never comes
        dist.init_process_group("gloo", store=dist.PrefixStore("gen/0/pg", store), rank=0, world_size=2,
                                timeout=timedelta(seconds=1))
    assert not dist.is_initialized()
    assert dist.distributed_c10d._world.group_count > 0  # what torch leaves behind
    _reset_group_counter()
    dist.init_process_group("gloo", store=dist.PrefixStore("gen/1/pg", store), rank=0, world_size=1,
                            timeout=timedelta(seconds=5))
    try:
        assert dist.distributed_c10d._get_default_group().group_name == "0"  # what a fresh peer uses
    finally:
        dist.destroy_process_group()
