"""Fail when two modules of the package import each other, directly or through others (grimp,
import-linter's graph; the layers contract allows cycles inside one layer, this does not)."""

from __future__ import annotations

import sys

import grimp


def cycles(package: str = "loadtest") -> list[tuple[str, str]]:
    graph = grimp.build_graph(package)
    found = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                found.add(tuple(sorted((module, imported))))
    return sorted(found)


if __name__ == "__main__":
    pairs = cycles()
    for a, b in pairs:
        print(f"import cycle: {a} <-> {b}", file=sys.stderr)
    sys.exit(1 if pairs else 0)
