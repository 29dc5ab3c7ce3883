"""The base of the backend specs: strict, frozen, with secrets and pre-flight checks as no-ops,
and the questions generic code asks of a system under test."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from loadtest.config.types import StrictModel

# a problem found in a scenario: where (the field's path, e.g. ("backend", "model")) and what
Problem = tuple[tuple[str, ...], str]


class Spec(StrictModel):
    """Base of the backend specs: strict, frozen, with secrets and pre-flight checks as no-ops."""

    # why ``load.workers`` > 1 cannot drive this kind, or None where each worker process can
    # drive the same system under test on its own (its own connections to it)
    workers_refused: ClassVar[str | None] = "it runs inside this process"
    # whether the system under test does its work in the client's own event loop (the
    # simulator): then the loop's busy share is partly the server's, and advice about the
    # client must not blame it for that load
    serves_in_client_loop: ClassVar[bool] = False
    # whether tokens are stamped when this client's event loop reads them (served models, the
    # simulator), so a busy loop makes stamps late; False where the process that makes them
    # stamps them (the local engine)
    stamps_in_client_loop: ClassVar[bool] = True

    def preflight(self, base_dir: Path) -> list[Problem]:
        """Cheap checks of referenced files (no imports of heavy modules): ``[(field_path, message)]``."""
        return []

    def secret_values(self) -> list[str]:
        """Values that must never be stored or shown (registered with ``core.secrets``)."""
        return []

    def redact(self, dumped: dict) -> dict:
        """This spec as saved in a result, with secret fields masked."""
        return dumped

    def served_at(self) -> str | None:
        """The API of the server the system under test runs in, when it is a server of its
        own (its /metrics beside it, its GPUs perhaps on another host); None when it runs in
        this process or an engine process this harness starts, on this host's devices."""
        return None
