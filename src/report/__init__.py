"""The sweep report: MLflow runs -> table, seed statistics and figures -> files on the sweep's run.

    python -m src.report [--experiment NAME] [--tracking-uri URI] [--out DIR]

`analyze` gathers everything from the tracker, `write` renders it to `reports/<experiment>/`, and
`generate_report` does both and attaches the files to the sweep's parent run (`report/`), where
MLflow's artifact viewer shows `report.html` with its figures inline and the CSVs as grids.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src import paths
from src.report.plots import plot_losses, plot_throughput, save
from src.report.runs import ReportError, load_curves, load_sweep, save_summary_run
from src.report.table import (
    Comparison,
    compare,
    display_rows,
    markdown_table,
    sentence,
    summarize,
    text_table,
)
from src.store import UI_TRAINING_VIEW

__all__ = ["Analysis", "ReportError", "analyze", "default_out_dir", "generate_report", "write"]


@dataclass
class Analysis:
    experiment: str
    tracking_uri: str
    experiment_id: str
    runs: pd.DataFrame  # one row per training run
    curves: pd.DataFrame  # step metrics, long format
    table: pd.DataFrame  # one row per variant
    comparisons: list[Comparison]
    superseded: int  # repeated (variant, seed) runs of which only the latest counts
    files: list[Path] = field(default_factory=list)
    report_run_id: str | None = None  # the MLflow run holding the files

    def ui_link(self, base: str = "http://127.0.0.1:5000") -> str:
        run = f"/runs/{self.report_run_id}" if self.report_run_id else "/runs"
        return f"{base}/#/experiments/{self.experiment_id}{run}?{UI_TRAINING_VIEW}"

    def sentences(self) -> list[str]:
        return [sentence(c) for c in self.comparisons]

    def text(self) -> str:
        """The report for a terminal: aligned table, then one sentence per comparison."""
        lines = [f"normsweep report: experiment {self.experiment!r} ({len(self.runs)} runs)", ""]
        lines += [text_table(*display_rows(self.table)), "", *self.sentences()]
        if self.superseded:
            lines += ["", f"({self.superseded} older runs of a repeated variant and seed were left out.)"]
        return "\n".join(lines)

    def markdown(self, figures: list[Path]) -> str:
        parts = [
            f"# normsweep report: `{self.experiment}`",
            f"{len(self.runs)} runs from `{self.tracking_uri}`. Cells are mean ± 95% CI (t) over finished seeds.",
            markdown_table(*display_rows(self.table)),
            "## Is it more than seed noise? (Welch's t-test, 95% CI of the difference)",
            "\n".join(f"- {s}" for s in self.sentences()) or "No pairs to compare.",
            "## Figures",
            "\n".join(f"![{p.stem}]({p.name})" for p in figures),
        ]
        return "\n\n".join(parts) + "\n"


def analyze(experiment: str, tracking_uri: str | None = None) -> Analysis:
    """Read the experiment from MLflow and compute the table and the comparisons."""
    uri = tracking_uri or paths.tracking_uri()
    sweep = load_sweep(experiment, uri)
    runs = sweep.runs
    if not (runs.outcome == "finished").any():
        counts = ", ".join(f"{n} {o}" for o, n in runs.outcome.value_counts().items()) or "no training runs"
        raise ReportError(f"MLflow experiment {experiment!r} has no finished runs yet ({counts})")
    return Analysis(
        experiment=experiment,
        tracking_uri=uri,
        experiment_id=sweep.experiment_id,
        runs=runs,
        curves=load_curves(uri, runs),
        table=summarize(runs),
        comparisons=compare(runs),
        superseded=sweep.superseded,
    )


def default_out_dir(experiment: str) -> Path:
    return paths.reports_dir(experiment)


def write(analysis: Analysis, out_dir: Path) -> list[Path]:
    """report.md, table.csv (per variant), runs.csv (per run) and the two PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [
        save(plot_losses(analysis.curves), out_dir / "loss_curves.png"),
        save(plot_throughput(analysis.runs), out_dir / "throughput.png"),
    ]
    analysis.table.to_csv(out_dir / "table.csv", index=False)
    analysis.runs.to_csv(out_dir / "runs.csv", index=False)
    markdown = analysis.markdown(figures)
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "report.html").write_text(html_page(analysis, figures))
    return [out_dir / "report.html", out_dir / "report.md", out_dir / "table.csv", out_dir / "runs.csv", *figures]


def html_page(analysis: Analysis, figures: list[Path]) -> str:
    """A self-contained page (figures embedded): MLflow's artifact viewer renders it as is."""
    table = analysis.table.to_html(index=False, float_format=lambda v: f"{v:,.4g}", na_rep="")
    sentences = "".join(f"<li>{html.escape(s)}</li>" for s in analysis.sentences())
    images = "".join(
        f'<h3>{html.escape(p.stem)}</h3><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>normsweep: {html.escape(analysis.experiment)}</title>"
        f"<body style='font-family:sans-serif'><h1>normsweep report: {html.escape(analysis.experiment)}</h1>"
        f"<p>{len(analysis.runs)} runs. Cells are mean ± 95% CI over finished seeds.</p>{table}"
        f"<h2>Comparisons</h2><ul>{sentences}</ul><h2>Figures</h2>{images}</body>"
    )


def generate_report(
    experiment: str, tracking_uri: str | None = None, out_dir: Path | None = None, log_summary: bool = True
) -> Analysis:
    """Analyze, write the files, and (optionally) log them to the sweep's parent run."""
    analysis = analyze(experiment, tracking_uri)
    analysis.files = write(analysis, out_dir or default_out_dir(experiment))
    if log_summary:
        analysis.report_run_id = save_summary_run(analysis.tracking_uri, analysis.experiment_id, analysis.files)
    return analysis
