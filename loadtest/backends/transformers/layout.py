"""Where one engine process sits: its rank in its tensor-parallel group, the group's devices,
and how many engine processes the run has. Loading and the parallel group both read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Where one engine process sits: its rank in its tensor-parallel group and the group's
    devices; ``processes`` counts every engine process of the run, ``index`` is this one's
    place among them (CPU blocks are handed out in that order: ``placement``)."""

    rank: int = 0
    size: int = 1
    devices: tuple[str, ...] = ("auto",)
    port: int = 0
    processes: int = 1
    index: int = 0

    @property
    def device(self) -> str:
        return self.devices[self.rank]
