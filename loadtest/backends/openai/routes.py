"""Several endpoints of one model (``backend.endpoints``: replicas or gateways with no load
balancer in front), and how a request picks one: in turn (``round_robin``), or the one with
the fewest requests in flight (``least_outstanding``, ties in turn)."""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.core.errors import BackendError
from loadtest.transport.pool import ConnectionPool


@dataclass
class Route:
    """One endpoint: its API root (without credentials), the URL its requests go to, its pool
    of connections, its name in the reports (its API root; one given twice, with its place),
    and its requests in flight."""

    base: str
    url: str
    pool: ConnectionPool
    label: str = ""
    outstanding: int = 0
    connect_errors: int = 0  # connection attempts in a row that failed

    def __post_init__(self) -> None:
        self.label = self.label or self.base

    def connect_failed(self, exc: Exception, limit: int) -> None:
        """Counted per endpoint: one of several that stops accepting connections is down as a
        lone server is, whatever the others answer (``BackendError`` at ``limit`` in a row)."""
        self.connect_errors += 1
        if self.connect_errors >= limit:
            raise BackendError(
                f"{self.label}: the server is down ({self.connect_errors} "
                f"connection attempts in a row failed; last: {exc})"
            )


class Router:
    """Picks each request's endpoint, and counts it in flight until it is done."""

    def __init__(self, routes: list[Route], policy: str) -> None:
        self.routes, self.policy = routes, policy
        self._next = 0

    @property
    def several(self) -> bool:
        return len(self.routes) > 1

    def pick(self) -> Route:
        routes, n = self.routes, len(self.routes)
        if self.policy == "least_outstanding":
            i = min(range(n), key=lambda k: (routes[k].outstanding, (k - self._next) % n))
        else:
            i = self._next % n
        self._next = (i + 1) % n
        routes[i].outstanding += 1
        return routes[i]

    @staticmethod
    def done(route: Route) -> None:
        route.outstanding -= 1
