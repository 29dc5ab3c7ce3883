"""How many files (sockets) this process may open: raised to its hard limit, as load tools do,
and checked against what a run will need before it starts.

A closed loop of N users over HTTP holds up to N connections at once, each a file descriptor.
Under a soft limit of 1024 (many shells' default) a run of 1,500 users would fail its sends with
EMFILE mid-run, which reads as a server that refuses connections. Raising the soft limit to the
hard one needs no privilege; past the hard one the run is refused before it starts, with the
number it needs.
"""

from __future__ import annotations

import errno

# Files a client process holds besides its connections: the interpreter's own, pipes to its
# workers, the run's files, telemetry.
MARGIN = 256
CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})  # out of file descriptors


def raise_limit() -> int | None:
    """Raise this process's soft limit on open files to its hard limit (children inherit it);
    the limit now, or None where the platform has none."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return soft if soft != resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


def shortfall(connections: int) -> tuple[int, int] | None:
    """(files needed, files this process may open) where ``connections`` at once would not fit
    under the limit even raised to its hard one; None where they fit (or the platform has no
    limit)."""
    limit = raise_limit()
    needed = connections + MARGIN
    if limit is None or needed <= limit:
        return None
    return needed, limit
