"""A deterministic, resumable sampler keyed on (seed, epoch, position).

The data order depends only on how many samples the job has consumed, never on the world size
or on which worker died: the global batch of a step is the next ``B`` indices of the epoch's
permutation, split into contiguous shards, one per rank. A run that is interrupted, shrunk and
regrown therefore sees exactly the samples of an uninterrupted run (replayable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(kw_only=True)
class DeterministicSampler:
    """Indices of a dataset of ``size`` samples; state is just ``samples_seen``."""

    size: int
    seed: int = 0
    samples_seen: int = 0

    def _perm(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.size, generator=g)

    def indices(self, start: int, count: int) -> list[int]:
        """Indices of samples ``start .. start+count-1`` of the infinite epoch stream."""
        out: list[int] = []
        while count > 0:
            epoch, offset = divmod(start, self.size)
            take = min(count, self.size - offset)
            out.extend(self._perm(epoch)[offset:offset + take].tolist())
            start += take
            count -= take
        return out

    def global_batch(self, batch_size: int) -> list[int]:
        """The next global batch (does not advance; call :meth:`advance` after the step)."""
        return self.indices(self.samples_seen, batch_size)

    def advance(self, batch_size: int) -> None:
        self.samples_seen += batch_size

    @property
    def epoch(self) -> int:
        return self.samples_seen // self.size

    def state_dict(self) -> dict[str, int]:
        return {"samples_seen": self.samples_seen, "seed": self.seed, "size": self.size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.samples_seen = int(state["samples_seen"])


def shard(indices: list[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous share of ``indices`` (sizes differ by at most one)."""
    n = len(indices)
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return indices[start:start + base + (1 if rank < extra else 0)]
