"""The report's files: `<paths.reports_dir>/<experiment>/` with the pages, the CSVs and the figures;
and what the sweep's run carries besides them, one tag per claim of the study with its word.

Every file's columns are made here or named here: claims.csv's (`claims_frame`) beside the others,
so a reader looking for a column of a file finds it where the file is written.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from src.report.analysis import Analysis
from src.report.figures.axis import file_name, numeric_axis, plot_by_axis
from src.report.figures.claims import plot_claims
from src.report.figures.losses import plot_losses
from src.report.figures.speed import plot_speed
from src.report.figures.stability import plot_stability
from src.report.figures.style import DESCRIPTION_WIDTH_PX, save
from src.report.judge.study import StudySection
from src.report.read.claims import STUDY_FILE
from src.report.render.html import html_page
from src.report.render.markdown import markdown_page
from src.report.words.pairs import comparisons_frame
from src.report.words.study import claim_reason, measured_by, part_reason
from src.report.words.table import csv_frame
from src.tracking.identity import safe_folder_name
from src.tracking.variants import LR_KEY


def report_folder(reports_dir: str | Path, experiment: str) -> Path:
    """`<reports_dir>/<experiment>/`, the experiment's name made a safe folder name (no separators,
    no `..`): a report never lands outside `reports_dir`."""
    return Path(reports_dir) / safe_folder_name(experiment, "experiment_name")


def write(analysis: Analysis, out_dir: Path) -> list[Path]:
    """report.html, report.md, the CSVs and the PNGs in `out_dir`, each CSV and figure only where it has
    something to hold (the comments below say when); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [save(plot_losses(analysis.curves), out_dir / "loss_curves.png")]
    axis = numeric_axis(analysis.runs, analysis.axes)
    if axis is not None:  # 30 learning rates read as a line, not as 30 names
        figures.append(save(plot_by_axis(analysis.runs, axis), out_dir / file_name(axis)))
    # Speed is drawn only as the check measured it: the jobs' own tokens/s (one after another or at once)
    # rank the machine's load, not the norms.
    # These two are drawn in the sweep run's description too: no wider than it is at 1440 px.
    # A file's claims are drawn where some has an interval: none of the study's in a one-seed sweep.
    shown = [(plot_speed(analysis.speed_verdicts, analysis.margins.speed), "speed.png"),
             *((plot_claims(s), f"{s.file.files_stem}.png") for s in analysis.claim_sections)]  # fmt: skip
    figures += [save(fig, out_dir / name, DESCRIPTION_WIDTH_PX) for fig, name in shown if fig is not None]
    # A sweep of the learning rate alone draws its one line once: by_optim_lr.png, with its seeds.
    if analysis.stability is not None and (axis is None or axis.name != LR_KEY):
        figures.append(save(plot_stability(analysis.stability), out_dir / "stability.png"))
    # The table's speed_vs_hand is the jobs' own tokens/s ratio: table.csv names it load-driven, and a caveat
    # beside it says how they ran and that it is not a measurement (src.report.words.table.csv_frame).
    frames = {
        "table.csv": csv_frame(analysis.table),
        "comparisons.csv": comparisons_frame(analysis),
        "runs.csv": analysis.runs,
        **{f"{s.file.files_stem}.csv": claims_frame(s) for s in analysis.claim_sections if s.claims},
        "stability.csv": analysis.stability,  # these two: a learning-rate sweep's (None otherwise)
        "lr_sensitivity.csv": analysis.sensitivity,
    }
    written = {name: frame for name, frame in frames.items() if frame is not None}
    for name, frame in written.items():
        frame.to_csv(out_dir / name, index=False)
    (out_dir / "report.md").write_text(markdown_page(analysis, figures))
    (out_dir / "report.html").write_text(html_page(analysis, figures))
    return [*(out_dir / n for n in ["report.html", "report.md", *written]), *figures]


CLAIM_TAG = "normsweep.study.claim{}"  # on the sweep's run: one tag per claim of the study's file, its word
FILE_CLAIM_TAG = "normsweep.claims.{}.claim{}"  # ...and of another claims file (its name, the claim's number)


def claim_tags(study: StudySection) -> dict[str, str]:
    """One tag per listed claim on the sweep's run: its word (filterable in the MLflow UI)."""
    name = study.file.name
    tag = CLAIM_TAG.format if name == STUDY_FILE else lambda n: FILE_CLAIM_TAG.format(name, n)
    return {tag(c.claim.number): c.word for c in study.claims}


def claims_frame(study: StudySection) -> pd.DataFrame:
    """claims.csv: one row per claim part with its figures, readings, word and reason (the plot's numbers)."""
    rows = []
    for c in study.claims:
        claim_why = claim_reason(c)  # the claim's line, as the terminal and report.md print it
        for f in c.findings:
            band = f.part.band(c.claim.metric)
            r = f.readings
            rows.append({
                "claim": c.claim.number, "part": f.part.label, "metric": c.claim.metric, "a": f.part.a, "b": f.part.b,
                "minus": " vs ".join(reversed(f.part.minus)) if f.part.minus else "", "asserts": f.part.asserts,
                "study": f.part.published(c.claim.metric), "band_low": band[0], "band_high": band[1],
                "estimate": f.estimate, "ci_low": f.low, "ci_high": f.high,
                # The level of whatever interval is given, read for a word or not (a CPU's job times have one too).
                "confidence": 1 - f.alpha if math.isfinite(f.low) and math.isfinite(f.high) else math.nan,
                "direction": r.direction if r else "", "size": r.size if r else "", "equivalence": r.equivalence if r else "",
                "margin": f.margin, "part_word": f.word, "claim_word": c.word, "because": f.because,
                "here_word": f.here_word or "", "reason": part_reason(f), "claim_reason": claim_why,
                "measured_by": measured_by(f.effect) if f.effect else "",
            })  # fmt: skip
        rows += [{"claim": c.claim.number, "part": label, "metric": c.claim.metric, "part_word": "not swept", "claim_word": c.word}
                 for label in c.not_swept]  # fmt: skip
    return pd.DataFrame(rows)
