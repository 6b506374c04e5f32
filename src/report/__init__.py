"""The sweep report: MLflow runs -> table, seed statistics and figures -> files + a summary run.

    python -m src.report [--experiment NAME] [--tracking-uri URI] [--out DIR]

`analyze` gathers everything from the tracker, `write` renders it to `reports/<experiment>/`, and
`generate_report` does both and attaches the files to the experiment's `summary` run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src import paths
from src.report.plots import plot_losses, plot_throughput, save
from src.report.runs import ReportError, load_curves, load_sweep, save_summary_run
from src.report.stability import by_learning_rate, is_lr_sweep, plot_stability
from src.report.stability import sentences as stability_sentences
from src.report.table import (
    Comparison,
    compare,
    display_rows,
    markdown_table,
    sentence,
    summarize,
    text_table,
)

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
    superseded: int  # repeated (variant, lr, seed) runs of which only the latest counts
    stability: pd.DataFrame | None = None  # per (variant, lr), when the sweep varied the learning rate
    files: list[Path] = field(default_factory=list)

    def sentences(self) -> list[str]:
        return [sentence(c) for c in self.comparisons]

    def text(self) -> str:
        """The report for a terminal: aligned table, then one sentence per comparison."""
        lines = [f"normsweep report: experiment {self.experiment!r} ({len(self.runs)} runs)", ""]
        lines += [text_table(*display_rows(self.table)), "", *self.sentences()]
        if self.stability is not None:
            lines += ["", *stability_sentences(self.stability)]
        if self.superseded:
            lines += ["", f"({self.superseded} older runs of a repeated variant, learning rate and seed were left out.)"]
        return "\n".join(lines)

    def markdown(self, figures: list[Path]) -> str:
        parts = [
            f"# normsweep report: `{self.experiment}`",
            f"{len(self.runs)} runs from `{self.tracking_uri}`. Cells are mean ± 95% CI (t) over finished seeds.",
            markdown_table(*display_rows(self.table)),
            "## Is it more than seed noise? (Welch's t-test, 95% CI of the difference)",
            "\n".join(f"- {s}" for s in self.sentences()) or "No pairs to compare.",
            *(
                ["## Learning-rate stability", "\n".join(f"- {s}" for s in stability_sentences(self.stability))]
                if self.stability is not None
                else []
            ),
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
        stability=by_learning_rate(runs) if is_lr_sweep(runs) else None,
    )


def default_out_dir(experiment: str) -> Path:
    return paths.reports_dir(experiment)


def write(analysis: Analysis, out_dir: Path) -> list[Path]:
    """report.md, table.csv (per variant), runs.csv (per run), the PNGs; stability.csv/png for a learning-rate sweep."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [
        save(plot_losses(analysis.curves), out_dir / "loss_curves.png"),
        save(plot_throughput(analysis.runs), out_dir / "throughput.png"),
    ]
    if analysis.stability is not None:
        figures.append(save(plot_stability(analysis.stability), out_dir / "stability.png"))
        analysis.stability.to_csv(out_dir / "stability.csv", index=False)
    analysis.table.to_csv(out_dir / "table.csv", index=False)
    analysis.runs.to_csv(out_dir / "runs.csv", index=False)
    (out_dir / "report.md").write_text(analysis.markdown(figures))
    tables = ["table.csv", "runs.csv"] + (["stability.csv"] if analysis.stability is not None else [])
    return [out_dir / "report.md", *(out_dir / t for t in tables), *figures]


def generate_report(
    experiment: str, tracking_uri: str | None = None, out_dir: Path | None = None, log_summary: bool = True
) -> Analysis:
    """Analyze, write the files, and (optionally) log them to the experiment's summary run."""
    analysis = analyze(experiment, tracking_uri)
    analysis.files = write(analysis, out_dir or default_out_dir(experiment))
    if log_summary:
        save_summary_run(analysis.tracking_uri, analysis.experiment_id, analysis.files)
    return analysis
