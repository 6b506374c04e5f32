"""The sweep report: MLflow runs -> table, paired comparisons and figures -> files on the sweep's run.

    python -m src.report [--experiment NAME] [--margin-loss M] [--margin-speed M] [overrides]

`analyze` gathers everything from the tracker, `write` renders it to `reports/<experiment>/`, and
`generate_report` does both and attaches the files to the sweep's parent run (`report/`), where
MLflow's artifact viewer shows `report.html` with its figures inline and the CSVs as grids.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src import paths
from src.report.comparisons import (
    NO_NORM,
    Margins,
    Result,
    compare,
    comparison_pairs,
    sentences,
    to_frame,
    unmatched_pairs,
)
from src.report.plots import plot_losses, plot_throughput, save
from src.report.provenance import code_sentence, mark_rows, reference_code
from src.report.runs import (
    ReportError,
    load_curves,
    load_interleaved,
    load_norm_costs,
    load_speed_check,
    load_sweep,
    open_store,
    save_summary_run,
    tag_variants,
)
from src.report.sequential_verdicts import SequentialVerdict, load_verdicts, with_verdicts
from src.report.sequential_verdicts import heading as sequential_heading
from src.report.speed import speed_lines
from src.report.stability import by_learning_rate, initial_losses, is_lr_sweep, lr_sensitivity, plot_stability
from src.report.stability import sentences as stability_sentences
from src.report.table import (
    display_rows,
    interleaved_cell,
    markdown_table,
    summarize,
    text_table,
    with_ci,
)
from src.tracking.identity import safe_folder_name
from src.tracking.store import Store
from src.tracking.summary import log_sweep_summary
from src.tracking.tags import FINISHED
from src.tracking.ui_view import ui_link
from src.tracking.variants import REFERENCE_VARIANT, Axis, metric_key

__all__ = [
    "Analysis", "Margins", "ReportError", "analyze", "default_out_dir", "generate_report", "report_folder", "write"
]


@dataclass
class Analysis:
    experiment: str
    tracking_uri: str
    experiment_id: str
    runs: pd.DataFrame  # one row per training run
    curves: pd.DataFrame  # step metrics, long format
    table: pd.DataFrame  # one row per variant
    comparisons: list[Result]  # per pair and metric (see src.report.comparisons)
    margins: Margins
    superseded: int  # repeated runs of one config (fingerprint) of which only the latest counts
    interleaved: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # bench-variants ratios
    norm_costs: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)  # and norm costs
    notes: list[str] = field(default_factory=list)  # requested pairs that could not be compared
    speed: list[str] = field(default_factory=list)  # the speed check's verdicts (src.report.speed), when it has them
    stability: pd.DataFrame | None = None  # per (variant, lr), when the sweep varied the learning rate
    sensitivity: pd.DataFrame | None = None  # per variant, Wortsman et al.'s LR sensitivity (same condition)
    axes: tuple[Axis, ...] = ()  # what the runs vary, seed aside (src.tracking.variants)
    files: list[Path] = field(default_factory=list)
    report_run_id: str | None = None  # the MLflow run holding the files
    store: Store | None = field(default=None, repr=False)  # where it was read, opened once
    code_note: str = ""  # the runs come from more than one code (src.report.provenance)
    sequential: list[SequentialVerdict] = field(default_factory=list)  # a sequential sweep's verdicts

    def ui_links(self, base: str) -> list[str]:
        """Where to look in the MLflow UI at `base`: the sweep run (its verdict), then every run."""
        links = [f"the sweep's verdict: {ui_link(base, self.experiment_id, self.report_run_id)}"] if self.report_run_id else []
        return [*links, f"every run, grouped by variant: {ui_link(base, self.experiment_id)}"]

    def verdict(self) -> str:
        """The answer in a few lines of markdown: per variant its headline numbers, then each pair's
        verdict (the sweep run's description in MLflow)."""
        lines = [f"**normsweep verdict, experiment `{self.experiment}`** ({self._heading()}):", ""]
        for r in self.table.itertuples(index=False):
            loss = with_ci(r.test_loss, r.test_loss_ci, "{:.4f}")
            speed = with_ci(r.tokens_per_sec, r.tokens_per_sec_ci, "{:,.0f}")
            notes = f"; {r.notes}" if r.notes else ""
            lines.append(f"- `{r.variant}`: test loss {loss}, {speed} tokens/s ({r.finished} seed(s) finished{notes})")
        lines += [f"- {s}" for s in self.sentences()] or [f"- {self.nothing_to_compare()}"]
        lines += [f"- {self.code_note}"] if self.code_note else []
        if self.sequential:
            lines += ["", f"{sequential_heading()}:", *(f"- {v.sentence()}" for v in self.sequential)]
        return "\n".join(lines)

    def sentences(self) -> list[str]:
        """One sentence per compared pair, why any requested pair was not compared, then the speed
        measured by interleaving (when the experiment has a bench-variants run)."""
        return sentences(self.comparisons) + self.notes + self.speed_sentences()

    def speed_sentences(self) -> list[str]:
        if self.speed:  # a speed check with the norms' kernels: a verdict per pair
            return self.speed
        if not self.interleaved:
            return []
        order = list(self.table.variant)  # the table's order
        cells = [f"{v} {interleaved_cell(self.interleaved[metric_key(v)])}" for v in order if metric_key(v) in self.interleaved]
        costs = [
            f"{v} {c[0]:+.1f} ms [{c[1]:+.1f}, {c[2]:+.1f}] ({c[0] / c[3]:.1%} of its {c[3]:,.0f} ms step)"
            for v in order
            if (c := self.norm_costs.get(metric_key(v))) is not None and v != NO_NORM and all(math.isfinite(x) for x in c)
        ]
        share = f" The norm's own cost (step minus no_norm's, same rounds): {'; '.join(costs)}." if costs else ""
        return [
            f"Speed, measured by interleaving the variants' training steps in one process (python -m src.bench "
            f"variants; step speed vs {REFERENCE_VARIANT}, median and 95% interval): {'; '.join(cells)}.{share} "
            "It replaces the tokens/s ratios of jobs run one after another, which measure the machine's load."
        ]

    def nothing_to_compare(self) -> str:
        if len(self.table) == 1:  # e.g. a sweep of the seed alone
            return f"No pairs to compare: every run is one variant ({self.table.variant.iloc[0]}); nothing but the seed varied."
        return "No pairs to compare."

    def comparisons_frame(self) -> pd.DataFrame:
        return with_verdicts(to_frame(self.comparisons), self.sequential)

    def rows(self) -> tuple[list[str], list[list[str]]]:
        return display_rows(self.table, self.interleaved)

    def _heading(self) -> str:
        m = self.margins
        return (
            f"Paired by seed (Welch where seed sets differ); equivalence by TOST within ±{m.test_loss:g} nats "
            f"of test loss and ±{m.speed:.0%} of tokens/s; Holm-adjusted over {len(self.comparisons)} comparisons"
        )

    def text(self) -> str:
        """The report for a terminal: aligned table, then one sentence per comparison."""
        lines = [f"normsweep report: experiment {self.experiment!r} ({len(self.runs)} runs)", ""]
        lines += [text_table(*self.rows()), ""]
        lines += [self.code_note, ""] if self.code_note else []
        if self.comparisons or self.notes:
            lines += [f"{self._heading()}:", *self.sentences()]
        else:
            lines += [self.nothing_to_compare()]
        if self.sequential:
            lines += ["", f"{sequential_heading()}:", *(f"  {v.sentence()}" for v in self.sequential)]
        if self.stability is not None:
            lines += ["", *stability_sentences(self.stability, self.sensitivity)]
        if self.superseded:
            lines += ["", f"({self.superseded} older runs of a config run again were left out.)"]
        return "\n".join(lines)

    def sections(self) -> list[tuple[str, str, list[str]]]:
        """The prose after the table, as (heading, lead, items): both file renderers walk this one
        list, so a section added here reaches the Markdown and the HTML report alike."""
        found = [
            (
                "Is it more than seed noise? Paired comparisons",
                self._heading() + " (all pairs in `comparisons.csv`).",
                self.sentences() or [self.nothing_to_compare()],
            )
        ]
        if self.sequential:
            found.append((sequential_heading(), "", [v.sentence() for v in self.sequential]))
        if self.stability is not None:
            found.append(("Learning-rate stability", "", stability_sentences(self.stability, self.sensitivity)))
        return found

    def markdown(self, figures: list[Path]) -> str:
        parts = [
            f"# normsweep report: `{self.experiment}`",
            f"{len(self.runs)} runs from `{self.tracking_uri}`. Cells are mean ± 95% CI (t) over finished seeds.",
            markdown_table(*self.rows()),
            *([self.code_note] if self.code_note else []),
        ]
        for heading, lead, items in self.sections():
            parts += [f"## {heading}", *([lead] if lead else []), "\n".join(f"- {s}" for s in items)]
        parts += ["## Figures", "\n".join(f"![{p.stem}]({p.name})" for p in figures)]
        return "\n\n".join(parts) + "\n"


def analyze(
    experiment: str,
    tracking_uri: str | None = None,
    margins: Margins | None = None,
    pairs: list[tuple[str, str]] | None = None,
    reference: dict[str, str] | None = None,
) -> Analysis:
    """Read the experiment from MLflow and compute the table and the comparisons.

    `pairs` (validated by `comparisons.check_pairs`) replaces the study's pairs when given;
    `reference` (`report.reference`: axis -> value) the reference value of an axis.
    """
    uri = tracking_uri or paths.tracking_uri()
    store = open_store(uri)
    sweep = load_sweep(experiment, store)
    runs = sweep.runs
    if not (runs.outcome == FINISHED).any():
        counts = ", ".join(f"{n} {o}" for o, n in runs.outcome.value_counts().items()) or "no training runs"
        raise ReportError(f"MLflow experiment {experiment!r} has no finished runs yet ({counts})")
    margins = margins or Margins()
    curves = load_curves(store, runs)
    lr_swept = is_lr_sweep(runs)
    code = reference_code(store, sweep.experiment_id, runs)
    return Analysis(
        experiment=experiment,
        tracking_uri=uri,
        experiment_id=sweep.experiment_id,
        runs=runs,
        curves=curves,
        table=mark_rows(summarize(runs), runs, code),
        comparisons=compare(runs, margins, pairs, reference),
        margins=margins,
        superseded=sweep.superseded,
        interleaved=load_interleaved(store, sweep.experiment_id),
        norm_costs=load_norm_costs(store, sweep.experiment_id),
        notes=unmatched_pairs(runs, pairs) if pairs is not None else [],
        speed=_speed(store, sweep.experiment_id, margins, [(a, b) for a, b, _ in comparison_pairs(runs, pairs, reference)]),
        stability=by_learning_rate(runs) if lr_swept else None,
        sensitivity=lr_sensitivity(runs, initial_losses(curves)) if lr_swept else None,
        axes=sweep.axes,
        store=store,
        code_note=code_sentence(runs, code),
        sequential=load_verdicts(store, sweep.experiment_id),
    )


def _speed(store: Store, experiment_id: str, margins: Margins, pairs: list[tuple[str, str]]) -> list[str]:
    """The speed section from the experiment's latest speed check (empty without one), for the
    report's pairs (`pairs`) that the check timed."""
    check = load_speed_check(store, experiment_id)
    variants = (check.get("settings") or {}).get("variants") or []
    if not check.get("kernel") or not variants:
        return []
    timed = [(a, b) for a, b in pairs if a in variants and b in variants]
    reference = REFERENCE_VARIANT if REFERENCE_VARIANT in variants else variants[0]
    return speed_lines(check, timed, margins.speed, reference)


def report_folder(reports_dir: str | Path, experiment: str) -> Path:
    """`<reports_dir>/<experiment>/`, the experiment's name made a safe folder name (no separators,
    no `..`): a report never lands outside `reports_dir`."""
    return Path(reports_dir) / safe_folder_name(experiment, "experiment_name")


def default_out_dir(experiment: str) -> Path:
    return report_folder(paths.compose().paths.reports_dir, experiment)


def write(analysis: Analysis, out_dir: Path) -> list[Path]:
    """report.html, report.md, table.csv (per variant), comparisons.csv, runs.csv (per run), the PNGs;
    stability.csv/png for a learning-rate sweep."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [
        save(plot_losses(analysis.curves), out_dir / "loss_curves.png"),
        save(plot_throughput(analysis.runs), out_dir / "throughput.png"),
    ]
    if analysis.stability is not None:
        figures.append(save(plot_stability(analysis.stability), out_dir / "stability.png"))
        analysis.stability.to_csv(out_dir / "stability.csv", index=False)
    if analysis.sensitivity is not None:
        analysis.sensitivity.to_csv(out_dir / "lr_sensitivity.csv", index=False)
    analysis.table.to_csv(out_dir / "table.csv", index=False)
    analysis.comparisons_frame().to_csv(out_dir / "comparisons.csv", index=False)
    analysis.runs.to_csv(out_dir / "runs.csv", index=False)
    (out_dir / "report.md").write_text(analysis.markdown(figures))
    (out_dir / "report.html").write_text(html_page(analysis, figures))
    names = ["report.html", "report.md", "table.csv", "comparisons.csv", "runs.csv"]
    names += ["stability.csv"] if analysis.stability is not None else []
    names += ["lr_sensitivity.csv"] if analysis.sensitivity is not None else []
    return [*(out_dir / n for n in names), *figures]


def html_page(analysis: Analysis, figures: list[Path]) -> str:
    """A self-contained page (figures embedded): MLflow's artifact viewer renders it as is."""
    header, rows = analysis.rows()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    sections = "".join(
        f"<h2>{html.escape(heading)}</h2>"
        + (f"<p>{html.escape(lead)}</p>" if lead else "")
        + "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in items) + "</ul>"
        for heading, lead, items in analysis.sections()
    )  # fmt: skip
    images = "".join(
        f'<h3>{html.escape(p.stem)}</h3><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>normsweep: {html.escape(analysis.experiment)}</title>"
        f"<body style='font-family:sans-serif'><h1>normsweep report: {html.escape(analysis.experiment)}</h1>"
        f"<p>{len(analysis.runs)} runs. Cells are mean ± 95% CI over finished seeds.</p>"
        f"<div style='overflow-x:auto'><table border=1 cellpadding=4><tr>{head}</tr>{body}</table></div>"
        f"{f'<p>{html.escape(analysis.code_note)}</p>' if analysis.code_note else ''}"
        f"{sections}"
        f"<h2>Figures</h2>{images}</body>"
    )


def generate_report(
    experiment: str,
    tracking_uri: str | None = None,
    out_dir: Path | None = None,
    log_summary: bool = True,
    margins: Margins | None = None,
    pairs: list[tuple[str, str]] | None = None,
    reference: dict[str, str] | None = None,
) -> Analysis:
    """Analyze, write the files, and (optionally) log them to the sweep's parent run, and tag each
    run with its variant as the report found it (the MLflow UI groups runs by that tag)."""
    analysis = analyze(experiment, tracking_uri, margins, pairs, reference)
    analysis.files = write(analysis, out_dir or default_out_dir(experiment))
    if log_summary:
        store = analysis.store or open_store(analysis.tracking_uri)
        tag_variants(store, analysis.runs, analysis.axes)
        analysis.report_run_id = save_summary_run(store, analysis.experiment_id, analysis.files)
        headers, rows = analysis.rows()
        log_sweep_summary(
            store,
            analysis.report_run_id,
            analysis.table.to_dict("records"),
            pd.DataFrame(rows, columns=headers),
            analysis.comparisons_frame(),
            analysis.verdict(),
        )
    return analysis
