"""A Hydra sweeper that adds seeds until every comparison is decided (`hydra/sweeper=sequential`).

    python -m src.train -m norm=hand_layernorm,torch_layernorm hydra/sweeper=sequential \\
        hydra.sweeper.first_seeds=3 hydra.sweeper.max_seeds=6

The swept parameters (`norm: ...`, from the command line or `hydra.sweeper.params`) name the
variants; the seeds are the sweeper's own. It launches round 1 (`first_seeds` seeds of every
variant) through the configured launcher (basic, joblib, submitit: a round runs in parallel where
the launcher does), reads the finished runs from MLflow, decides each comparison (the report's
pairs, on each of `metrics`) with the rule in `src.stats.sequential`, and launches the next
`seeds_per_round` seeds only for variants that an undecided comparison still needs. It stops when
every comparison is decided or at `max_seeds`, and says which and why.

The looks are a function of the seeds' results alone, so re-running the identical command replays
them from MLflow: seeds already finished count and are not launched again, a killed round launches
only its missing jobs (which resume from their checkpoints), a finished sweep launches nothing.
Each look is filed on the sweep's parent run (`src.tracking.looks`).

Hydra instantiates sweepers only from the `hydra_plugins` package, so the class Hydra sees is a
subclass of this one in hydra_plugins/normsweep_sweepers/sequential.py.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from src.core import terminal
from src.core.paths import ConfigError
from src.launch.sweep_end import returned
from src.stats.pairs import pair_label
from src.stats.settings import METRIC_CHOICES, SETTINGS, check_settings, check_sweeper  # noqa: F401  (the sweeper's settings)
from src.tracking.tags import RESULT_OUTCOMES

if TYPE_CHECKING:
    from src.stats.sequential import Design
    from src.stats.verdicts import SequentialWord
    from src.tracking.store import Store

SWEEPER_CLASS = "SequentialSweeper"
def is_sequential(sweeper_cfg: Any) -> bool:
    target = OmegaConf.select(sweeper_cfg, "_target_", default="") if sweeper_cfg is not None else ""
    return str(target).endswith(f".{SWEEPER_CLASS}")


def _check_no_seed(arguments: Sequence[str]) -> None:
    for arg in arguments:
        key = arg.split("=", 1)[0].lstrip("+~")
        if key == "seed":
            raise ConfigError(
                f"seed: the sequential sweeper chooses the seeds (0, 1, ... up to hydra.sweeper.max_seeds); remove {arg!r}"
            )


def first_round_overrides(config: DictConfig) -> list[str]:
    """For the sweep's job list (src.launch.callbacks): the first round's seeds, after validating the
    settings, so a bad setting is refused before the parent run is recorded. [] for other sweepers."""
    sweeper = OmegaConf.select(config, "hydra.sweeper", default=None)
    if not is_sequential(sweeper):
        return []
    s = OmegaConf.to_container(sweeper, resolve=True)
    check_sweeper(s)
    params = s.get("params") or {}
    _check_no_seed([*(f"{k}={v}" for k, v in params.items()), *config.hydra.overrides.task])
    return [f"seed={','.join(str(i) for i in range(s['first_seeds']))}"]


@dataclass
class Comparison:
    """One pair on one metric, followed across looks until decided."""

    a: str
    b: str
    metric: str
    margin: float
    decision: str = field(default_factory=lambda: _words().UNDECIDED)  # a SequentialWord (src.stats.verdicts)
    seeds: int | None = None  # seeds per variant at the look that decided it
    look: int | None = None  # the look (1-based) that decided it
    spent: float | None = None  # the level this comparison had spent by that look (of alpha / family)
    last: dict[str, Any] = field(default_factory=dict)  # the latest look's numbers

    @property
    def name(self) -> str:
        return f"{pair_label(self.a, self.b)} ({self.metric})"

    @property
    def open(self) -> bool:
        return self.decision == _words().UNDECIDED


def _words() -> type[SequentialWord]:
    """The sequential decisions' Enum, imported when a decision is made: Hydra's plugin scan imports
    this module at every start, and src.stats.verdicts brings scipy."""
    from src.stats.verdicts import SequentialWord

    return SequentialWord


class SequentialSweeper(Sweeper):
    def __init__(
        self,
        first_seeds: int,
        seeds_per_round: int,
        max_seeds: int,
        alpha: float,
        metrics: Sequence[str],
        spending: str,
        futility: float,
        params: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        metrics = list(metrics) if not isinstance(metrics, str) else [metrics]
        try:
            check_settings(first_seeds, seeds_per_round, max_seeds, alpha, metrics, spending, futility)
        except ConfigError as err:  # Hydra would wrap it in an instantiation error with a traceback hint
            raise SystemExit(f"config error: {err}") from None
        self.first_seeds, self.seeds_per_round, self.max_seeds = first_seeds, seeds_per_round, max_seeds
        self.alpha, self.metrics = float(alpha), metrics
        self.spending, self.futility = spending, float(futility)
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.job_idx = 0
        self._fingerprint_cache: dict[str, dict[int, str]] = {}
        self.families: dict[str, str] = {}  # norm key -> its family (conf/norm/<key>.yaml)
        self.variant_rows: list[dict[str, Any]] = []  # per variant: label, norm, family, axis values

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    # --- the variants and the comparisons ----------------------------------------------------------

    def _variants(self, arguments: Sequence[str]) -> dict[str, list[str]]:
        """variant -> the overrides of that variant (swept values plus the fixed overrides); a variant is
        what the swept values change in the config (src.tracking.variants): the norm, or any other axis."""
        from src.core.paths import compose
        from src.report.read.table import AXIS_PREFIX
        from src.tracking.identity import flatten, identity_config
        from src.tracking.variants import find_variants

        assert self.hydra_context is not None
        everything = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        _check_no_seed(everything)
        parsed = OverridesParser.create(config_loader=self.hydra_context.config_loader).parse_overrides(
            everything
        )
        lists: dict[str, list[str]] = {}  # by key: the command line overrides hydra.sweeper.params
        for override in parsed:
            key = override.get_key_element()
            if override.is_sweep_override():
                if not override.is_discrete_sweep():
                    raise ConfigError(
                        f"{key}: the sequential sweeper takes lists of values (a,b,c), not ranges or intervals"
                    )
                lists[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
            else:
                lists[key] = [f"{key}={override.get_value_element_as_str()}"]
        combos = [list(combo) for combo in itertools.product(*lists.values())]
        configs = [self._job_config(combo) for combo in combos]
        # Composed as the jobs' runs record them (a sweep config's `hydra` node does not resolve here).
        found = find_variants({str(i): flatten(identity_config(compose(combo))) for i, combo in enumerate(combos)})
        variants: dict[str, list[str]] = {}
        for i, (combo, job) in enumerate(zip(combos, configs, strict=True)):
            label, norm = found.labels[str(i)], str(job.norm.norm_type)
            self.families[norm] = str(job.norm.get("family", "unknown"))
            if label in variants:
                raise ConfigError(
                    f"hydra.sweeper.params: {variants[label]} and {combo} are the same config ({label!r}); "
                    "sweep values that change it"
                )
            variants[label] = combo
            parts = {f"{AXIS_PREFIX}{name}": value for name, value in found.parts[str(i)].items()}
            self.variant_rows.append({"variant": label, "norm": norm, "family": self.families[norm], **parts})
        return variants

    def _job_config(self, overrides: list[str]) -> DictConfig:
        assert self.hydra_context is not None and self.config is not None
        return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)

    def _comparisons(
        self, variants: Mapping[str, Sequence[str]], families: Mapping[str, str]
    ) -> list[Comparison]:
        import pandas as pd

        from src.report.judge.pairs import comparison_pairs
        from src.report.read.settings import reference_setting, settings
        from src.tracking.tags import FINISHED

        assert self.config is not None
        report_cfg = (
            OmegaConf.to_container(self.config.report, resolve=True) if "report" in self.config else None
        )
        margins, pairs = settings(report_cfg)
        # The report's pairs, from one finished row per variant in the order they were swept.
        rows = pd.DataFrame(self.variant_rows).assign(outcome=FINISHED, start_time=range(len(self.variant_rows)))
        chosen = [(a, b) for a, b, _ in comparison_pairs(rows, pairs, reference_setting(report_cfg))]
        if not chosen:
            raise ConfigError(
                f"report.pairs: no pair to compare among the swept variants {list(variants)}; sweep a pair of the study's "
                "(e.g. norm=hand_layernorm,torch_layernorm) or name one in report.pairs=[[a,b]]"
            )
        metric_margin = {"test_loss": margins.test_loss, "tokens_per_sec": margins.speed}
        return [Comparison(a, b, m, metric_margin[m]) for a, b in chosen for m in self.metrics]

    # --- the loop ----------------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> Any:
        from src.stats.sequential import Design

        assert self.config is not None and self.launcher is not None
        if not self.config.logger.enabled:
            raise ConfigError(
                "logger.enabled: the sequential sweeper reads each round's results from MLflow; must be true"
            )
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")

        variants = self._variants(arguments)
        first = self._job_config(next(iter(variants.values())))
        comparisons = self._comparisons(variants, self.families)
        design = Design.of(vars(self), family=len(comparisons))
        experiment = str(first.experiment_name)
        from src.tracking.store import Store  # imported late: Hydra imports this module at start-up
        from src.tracking.sweep import PARENT_ENV

        store = Store.connect(str(first.logger.tracking_uri))  # opened once for every look

        parent = os.environ.get(PARENT_ENV)
        say(
            f"sequential sweep of {len(variants)} variants ({', '.join(variants)}), {len(comparisons)} comparison(s), "
            f"looks at {design.looks()} seeds, alpha {self.alpha} spent {self.spending.replace('_', '-')}-type (per look and "
            f"comparison: {', '.join(f'{x:.2g}' for x in design.levels())}), futility below {self.futility:g}"
        )
        looks: list[dict[str, Any]] = []
        returns = []
        reason = ""
        for k, (n, level) in enumerate(zip(design.looks(), design.levels(), strict=True), start=1):
            needed = sorted({v for c in comparisons if c.open for v in (c.a, c.b)})
            results = self._results(store, experiment, variants, n)
            missing = [(v, s) for v in needed for s in range(n) if (v, s) not in results]
            if missing:
                say(
                    f"look {k}: launching {len(missing)} job(s): "
                    + ", ".join(f"{v}-s{s}" for v, s in missing)
                )
                returns.append(self._launch(variants, missing))
                results = self._results(store, experiment, variants, n)
            else:
                say(f"look {k}: every seed below {n} of {', '.join(needed)} already has a result in MLflow")
            lacking = [f"{v}-s{s}" for v, s in missing if (v, s) not in results]
            if lacking:
                reason = f"round {k} incomplete: {', '.join(lacking)} without a result; re-run the same command to resume"
                looks.append(self._look(k, n, level, needed, results, comparisons, reason))
                break
            for c in (c for c in comparisons if c.open):
                self._decide(c, results, design, k)
            undecided = [c for c in comparisons if c.open]
            if not undecided:
                counts = [(sum(c.decision == d for c in comparisons), d.label) for d in (_words().UNDECIDABLE, _words().UNTESTABLE)]
                notes = ", ".join(f"{count} {label}" for count, label in counts if count)
                reason = f"every comparison decided after {n} seeds" + (f" ({notes})" if notes else "")
            elif n == design.max_seeds:
                reason = f"max_seeds={n} reached with {len(undecided)} comparison(s) undecided"
            looks.append(self._look(k, n, level, needed, results, comparisons, reason or None))
            self._file_looks(store, parent, looks, None)
            for c in comparisons:
                if c.last.get("look") == k:
                    say(f"  {describe(c)}")
            if reason:
                break
        summary = "\n".join([f"stopped: {reason}", *(describe(c) for c in comparisons)])
        say(summary)
        self._file_looks(store, parent, looks, (reason, summary))
        return returns

    def _results(
        self, store: Store, experiment: str, variants: Mapping[str, Sequence[str]], n: int
    ) -> dict[tuple[str, int], dict[str, float]]:
        """(variant, seed < n) -> its metrics, for the runs with a result of exactly that job's config."""
        from src.report.read.runs import load_sweep

        # Matched by fingerprint: a run is the job whose config it has, whatever the report names it.
        wanted = {fp: (v, s) for v, o in variants.items() for s, fp in self._fingerprints(v, o, n).items()}
        out: dict[tuple[str, int], dict[str, float]] = {}
        for row in load_sweep(experiment, store).runs.itertuples(index=False):
            if row.outcome in RESULT_OUTCOMES and row.fingerprint in wanted:
                out[wanted[row.fingerprint]] = {m: float(getattr(row, m)) for m in METRIC_CHOICES}
        return out

    def _fingerprints(self, variant: str, overrides: Sequence[str], n: int) -> dict[int, str]:
        """seed (< n) -> the fingerprint of that job, as its run records it (composed once per job)."""
        from src.core.paths import compose
        from src.tracking.identity import fingerprint

        known = self._fingerprint_cache.setdefault(variant, {})
        for seed in range(n):
            if seed not in known:
                known[seed] = fingerprint(compose([*overrides, f"seed={seed}"]))
        return known

    def _launch(self, variants: Mapping[str, Sequence[str]], jobs: Sequence[tuple[str, int]]) -> Any:
        batch = [[*variants[v], f"seed={s}"] for v, s in jobs]
        self.validate_batch_is_legal(batch)
        returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
        self.job_idx += len(batch)
        failed = [r for r in returns if r.status == JobStatus.FAILED]
        for r in failed:  # the job's own error is on its log; the look reports the missing result
            terminal.say(f"[normsweep] job failed: {r.overrides}: {returned(r)!r}", sys.stderr)
        return returns

    def _decide(
        self, c: Comparison, results: Mapping[tuple[str, int], Mapping[str, float]], design: Design, k: int
    ) -> None:
        """Look k (1-based) at comparison c: decided, stopped for futility, or still open."""
        from src.report.judge.pairs import paired_difference
        from src.stats.sequential import look_at

        n = design.looks()[k - 1]
        diffs = [
            paired_difference(c.metric, results[(c.a, s)][c.metric], results[(c.b, s)][c.metric])
            for s in range(n)
        ]
        look = look_at(design, k - 1, diffs, c.margin)
        c.last = {"look": None, **asdict(look), "futility": design.futility, "max_seeds": design.max_seeds}
        if look.n < 2:
            c.decision, c.seeds = _words().UNTESTABLE, n
            c.last["reason"] = f"{look.n} seed(s) with a finite {c.metric} on both sides (diverged runs)"
        elif look.decision != _words().UNDECIDED:
            c.decision, c.seeds = look.decision, n
        if c.decision != _words().UNDECIDED or n == design.max_seeds:  # its verdict, or the end of the budget
            c.look, c.spent = k, design.spent_by()[k - 1]

    def _look(
        self,
        k: int,
        n: int,
        level: float,
        needed: Sequence[str],
        results: Mapping[tuple[str, int], Any],
        comparisons: Sequence[Comparison],
        reason: str | None,
    ) -> dict[str, Any]:
        for c in comparisons:
            if c.last and c.last["look"] is None:
                c.last["look"] = k
        seeds = {v: sum(1 for (var, s) in results if var == v and s < n) for v in needed}
        rows = [{"comparison": c.name, "a": c.a, "b": c.b, "metric": c.metric, "margin": c.margin, "decision": c.decision,
                 "decided_at_seeds": c.seeds, "decided_at_look": c.look, "spent": c.spent, **c.last}
                for c in comparisons]  # fmt: skip
        return {
            "look": k,
            "seeds": n,
            "level": level,
            "seeds_per_variant": seeds,
            "comparisons": rows,
            "stop_reason": reason,
        }

    @staticmethod
    def _file_looks(
        store: Store, parent: str | None, looks: Sequence[Mapping[str, Any]], stop: tuple[str, str] | None
    ) -> None:
        """Rewrite the looks on the parent run (none when MLflow logging made no parent), and the stop."""
        if not parent:
            return
        from src.tracking.looks import record_looks, record_stop

        record_looks(store, parent, looks)
        if stop:
            record_stop(store, parent, stop[0], stop[1] + "\n")


def chance_floor(chance: float) -> str:
    """A lower bound on a probability, in whole percent: rounded down so it stays a lower bound, and
    never 100% (1 − 10⁻⁴ rounds there, and "≥ 100%" reads as no probability at all)."""
    return f"{min(math.floor(chance * 100), 99)}%"


def describe(c: Comparison) -> str:
    """One line: the comparison, its verdict, the look and seeds it took and the level spent by then,
    with the last look's interval (and, for one the budget cannot settle, what it could detect)."""
    last = c.last
    if not last:
        return f"{c.name}: not looked at"
    word = _words()
    if c.decision == word.UNTESTABLE:
        return f"{c.name}: not testable: {last.get('reason', '')}"
    relative = c.metric == "tokens_per_sec"

    def fmt(x: float) -> str:
        return f"{x:+.2%}" if relative else f"{x:+.4f}"

    def least(x: float) -> str:
        return f"{abs(x):.0%}" if relative else f"{abs(x):.2g}"

    interval = f"Δ {fmt(last['diff'])}, {1 - last['level']:.2%} CI [{fmt(last['low'])}, {fmt(last['high'])}]"
    margin = f"{c.margin:.0%}" if relative else f"{c.margin:g}"
    seeds = c.seeds if c.seeds is not None else last["n"]
    where = f"at look {c.look} with {seeds} seeds per variant, level spent {c.spent:.2g}" if c.look is not None else ""
    if c.decision == word.EQUIVALENT:
        verdict = f"{word.EQUIVALENT} within ±{margin} {where}"
    elif c.decision == word.DIFFERENT:
        verdict = f"{word.DIFFERENT} {where}"
    elif c.decision == word.UNDECIDABLE:
        verdict = (f"{word.UNDECIDABLE.label} {where}: a later look decides with probability {last['chance']:.0%} "
                   f"(< futility {last['futility']:g}); max_seeds={last['max_seeds']} detects |Δ| ≥ {least(last['detectable'])} "
                   f"(80% power)")  # fmt: skip
    elif c.look is not None:
        verdict = f"{word.UNDECIDED} at max_seeds {where}; it detects |Δ| ≥ {least(last['detectable'])} (80% power)"
    else:
        chance = last.get("chance")
        verdict = f"{word.UNDECIDED} after {seeds} seeds" + (
            f" (a later look decides with probability ≥ {chance_floor(chance)})" if chance is not None and math.isfinite(chance) else ""
        )
    return f"{c.name}: {verdict} ({interval}, p {last['p']:.2g}, TOST p {last['tost_p']:.2g}, level {last['level']:.2g})"


def say(text: str) -> None:
    for line in text.splitlines():
        terminal.say(f"[normsweep] {line}")
