"""One walk over the report's sections (src.report.render.sections): report.md, report.html, the terminal
text and the verdict say each section's words alike, each laid out its own way.

Fast: an Analysis of made-up GPU runs at the study's setting, as tests/study_runs.py builds them.
"""

from __future__ import annotations

import html
import re

import pandas as pd
from study_runs import SEEDS, jitter, judged_section, study_runs

from src.report.analysis import Analysis
from src.report.judge.pairs import Margins, compare
from src.report.judge.sequential import SequentialVerdict
from src.report.read.published import TABLE
from src.report.read.table import summarize
from src.report.render.html import html_page
from src.report.render.markdown import _verdict, markdown_page
from src.report.render.sections import Cut, Output, blocks
from src.report.render.terminal import terminal_text
from src.report.words import sequential
from src.report.words.pairs import section_sentences


def _analysis() -> Analysis:
    runs = study_runs({v: SEEDS + 0.001 * i + jitter(i) for i, v in enumerate(TABLE)})
    sequential = [SequentialVerdict("torch_layernorm vs hand_layernorm", "test_loss", "different", 2, 4, 0.02, 0.02)]
    return Analysis("walk", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), compare(runs), Margins(), 0,
                    code_note="The runs come from two codes.", sequential=sequential, study=judged_section(runs))  # fmt: skip


def _words(text: str) -> str:
    """The text with its wrapping undone (a terminal's lines)."""
    return " ".join(text.split())


def test_the_page_the_terminal_and_the_verdict_say_each_sections_words() -> None:
    a = _analysis()
    md, page, text = markdown_page(a, []), html_page(a, []), _words(terminal_text(a))
    full, short = _verdict(a, Cut.NONE), _verdict(a, Cut.TABLE)
    # The two pages: the same sections in the same order, every bullet in both.
    md_headings = re.findall(r"^## (.+)$", md, re.M)
    assert md_headings == [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", page)]
    assert md_headings == [*(b.heading for b in blocks(a, Output.PAGE) if b.heading), "Figures"]
    # report.html shows a code span as code (it showed the Markdown backticks), otherwise the same words.
    items = [html.unescape(re.sub(r"</?code>", "`", li)) for li in re.findall(r"<li>(.*?)</li>", page)]
    for b in blocks(a, Output.PAGE):
        for item in b.items:
            assert f"- {item}" in md and item in items
    assert "`" in md and "`" not in page and "<code>" in page
    # Each pair's sentence and each sequential verdict on the terminal and in the verdict that has room.
    said = [*section_sentences(a), *(sequential.sentence(v) for v in a.sequential)]
    assert len(said) > 2
    for sentence in said:
        assert _words(sentence) in text and f"- {sentence}" in full
    assert f"- {a.code_note}" in full and a.code_note in text
    # Short of room, the verdict counts the pairs' sentences and keeps a word per claim.
    assert not any(f"- {s}" in short for s in section_sentences(a))
    assert f"- {len(section_sentences(a))} sentences on the pairs and their speed: report.md on this run" in short
    assert all(f"- {c.claim.number}. {c.word} — {c.claim.statement}" in short for c in a.study.claims)
    # The study's section ends every output (what a sweep ends with).
    assert text.rfind("Against the published study") > text.rfind(_words(said[-1]))
    assert md.index("## Against the published study") > md.index("## Seeds per verdict")
