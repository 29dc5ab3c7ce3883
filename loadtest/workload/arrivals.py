"""Arrival processes: each turns a seeded RNG into send offsets (integer ns from t0).

Open-loop processes yield a non-decreasing sequence of offsets (strictly increasing for the random
ones), computed from a running float sum and rounded once per offset, so a long run does not
drift. The closed-loop ``concurrency`` process has no offsets: its users send when their previous
request is done; what it fixes before t0 is the sequence of think times.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from loadtest.config.arrivals import (
    BurstArrival,
    ConcurrencyArrival,
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    RampArrival,
    StepsArrival,
    TraceArrival,
)
from loadtest.core.clock import NS_PER_S
from loadtest.workload.traces import Trace


class ArrivalProcess(Protocol):
    """A seeded process that gives every open-loop send time, as offsets from t0."""

    def offsets_ns(self, rng: random.Random) -> Iterator[int]: ...


@dataclass(frozen=True)
class Constant:
    """One request every 1/rate seconds, on absolute offsets (no drift)."""

    rate: float

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        return (round(k * NS_PER_S / self.rate) for k in itertools.count())


@dataclass(frozen=True)
class Poisson:
    """Exponential gaps at the given rate."""

    rate: float

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        t = 0.0
        while True:
            yield round(t * NS_PER_S)
            t += rng.expovariate(self.rate)


@dataclass(frozen=True)
class Gamma:
    """Gamma gaps with mean 1/rate and coefficient of variation ``cv`` (shape 1/cv², cv=1 is Poisson)."""

    rate: float
    cv: float

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        shape = 1.0 / (self.cv * self.cv)
        scale = 1.0 / (self.rate * shape)
        t = 0.0
        while True:
            yield round(t * NS_PER_S)
            t += rng.gammavariate(shape, scale)


@dataclass(frozen=True)
class Ramp:
    """Poisson arrivals at a rate going linearly from ``r0`` to ``r1`` over ``over_s``, then
    ``r1``: a non-homogeneous Poisson process, drawn by time rescaling (unit-rate exponential
    gaps in the integrated rate Λ(t), mapped back through its inverse)."""

    r0: float
    r1: float
    over_s: float

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        s = 0.0  # Λ of the next arrival
        while True:
            yield round(self.time_at(s) * NS_PER_S)
            s += rng.expovariate(1.0)

    def time_at(self, s: float) -> float:
        """The time t at which Λ(t) = s."""
        r0, r1, d = self.r0, self.r1, self.over_s
        whole = (r0 + r1) / 2 * d  # Λ at the ramp's end
        if s >= whole:
            return d + (s - whole) / r1
        a = (r1 - r0) / (2 * d)  # Λ(t) = r0 t + a t², solved for t
        if abs(a) < 1e-15:
            return s / r0
        return (-r0 + math.sqrt(r0 * r0 + 4 * a * s)) / (2 * a)


@dataclass(frozen=True)
class Steps:
    """Poisson arrivals at each step's rate for its length, in turn; none after the last."""

    steps: tuple[tuple[float, int], ...]  # (rate, length ns)

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        start = 0
        for rate, length in self.steps:
            t = rng.expovariate(rate) * NS_PER_S  # memoryless: a step starts afresh
            while t < length:
                yield start + round(t)
                t += rng.expovariate(rate) * NS_PER_S
            start += length


@dataclass(frozen=True)
class Burst:
    """Every request at t0."""

    def offsets_ns(self, rng: random.Random) -> Iterator[int]:
        return itertools.repeat(0)


@dataclass(frozen=True)
class ThinkTime:
    """The pause between a response and the next request: fixed, or exponential with that mean."""

    mean_ns: int
    exponential: bool

    def times_ns(self, rng: random.Random) -> Iterator[int]:
        """One seeded stream of think times (shared by all users, or all sessions)."""
        if not self.exponential or self.mean_ns == 0:
            return itertools.repeat(self.mean_ns)
        return (round(rng.expovariate(1.0) * self.mean_ns) for _ in itertools.count())


@dataclass(frozen=True)
class ClosedLoop:
    """``users`` senders; each waits ``think`` after its previous response."""

    users: int
    think_ns: int
    exponential: bool

    def think_times_ns(self, rng: random.Random) -> Iterator[int]:
        """One seeded stream of think times shared by all users."""
        return ThinkTime(self.think_ns, self.exponential).times_ns(rng)


# kind -> factory(spec, resolve, max_rows): ``resolve`` maps a scenario-relative name to a Path;
# a trace holds at most ``max_rows`` requests
ARRIVALS: dict[str, Callable] = {
    "constant": lambda s, *_: Constant(s.rate),
    "poisson": lambda s, *_: Poisson(s.rate),
    "gamma": lambda s, *_: Gamma(s.rate, s.cv),
    "burst": lambda s, *_: Burst(),
    "trace": lambda s, resolve, max_rows: Trace(resolve(s.file), s, max_rows),
    "concurrency": lambda s, *_: ClosedLoop(s.users, s.think_time, s.think == "exponential"),
    "ramp": lambda s, *_: Ramp(s.from_, s.to, s.over / NS_PER_S),
    "steps": lambda s, *_: Steps(tuple((step.rate, step.for_) for step in s.steps)),
}


def make_arrival(
    spec: ConstantArrival
    | PoissonArrival
    | GammaArrival
    | BurstArrival
    | TraceArrival
    | ConcurrencyArrival
    | RampArrival
    | StepsArrival,
    resolve: Callable[[str], Path],
    max_rows: int = 10**9,
) -> ArrivalProcess | ClosedLoop:
    """The arrival process for a scenario's ``load.arrival``."""
    return ARRIVALS[spec.kind](spec, resolve, max_rows)
