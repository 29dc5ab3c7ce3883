"""Every finished request's key times, kept compactly for the stability judgement."""

from __future__ import annotations

from array import array


class Timeline:
    """Each finished request's intended, first-token, admitted and done times (ns), compactly."""

    def __init__(self) -> None:
        self.intended = array("q")
        self.first = array("q")  # -1: no token
        self.admitted = array("q")  # -1: not reported
        self.done = array("q")
        self.measured = array("b")
        self.good = array("b")  # 1 met every goodput objective, 0 did not, -1 not judged

    def add(
        self,
        intended: int,
        first: int | None,
        admitted: int | None,
        done: int,
        measured: bool,
        good: int = -1,
    ) -> None:
        self.intended.append(intended)
        self.first.append(-1 if first is None else first)
        self.admitted.append(-1 if admitted is None else admitted)
        self.done.append(done)
        self.measured.append(1 if measured else 0)
        self.good.append(good)

    def __len__(self) -> int:
        return len(self.intended)
