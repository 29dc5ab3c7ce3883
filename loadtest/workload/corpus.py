"""The natural-language corpus synthetic prompts are drawn from (``workload.text: natural``).

Random token ids tokenize unlike any prompt: a server's speculative decoder finds nothing to
predict in them and its prefix cache nothing to share but what the plan made identical. So a
synthetic prompt is, by default, a passage of English: Shakespeare in the Globe edition (public
domain; ``tools/build_corpus.py`` builds it), shipped gzipped with the package, ASCII, one speech
a line. A passage starts at a seeded word boundary (on the space before a word, so a passage
joined to another text does not merge with it into one token) and wraps around at the end.
"""

from __future__ import annotations

import functools
import gzip
import random
from importlib import resources

SOURCE = "Shakespeare, Globe edition (1866), public domain"


@functools.cache
def text() -> str:
    """The whole corpus (about 1.9 million characters), read once a process."""
    data = resources.files("loadtest.workload").joinpath("data/corpus.txt.gz").read_bytes()
    return gzip.decompress(data).decode("ascii")


def word_start(rng: random.Random) -> int:
    """A seeded offset of a space or newline that precedes a word."""
    corpus = text()
    at = rng.randrange(len(corpus))
    while True:
        space = min(
            (i for i in (corpus.find(" ", at), corpus.find("\n", at)) if i >= 0),
            default=-1,
        )
        if space < 0:  # past the last space: from the top
            at = 0
            continue
        if space + 1 < len(corpus) and not corpus[space + 1].isspace():
            return space
        at = space + 1


def passage(start: int, chars: int) -> str:
    """``chars`` characters of the corpus from ``start``, wrapping around at its end."""
    corpus = text()
    out, at = [], start
    while chars > 0:
        piece = corpus[at : at + chars]
        out.append(piece)
        chars -= len(piece)
        at = 0
    return "".join(out)
