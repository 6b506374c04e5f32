"""Each job's estimates with their 95% intervals as lines MLflow's chart view draws: interval bars.

MLflow 3.17 draws a one-off metric as a bar from zero and has no error bars. So each job's run also logs
its variant's interval of a result as three points of a step metric, `intervals/<result>`: the low end,
the estimate and the high end, at steps `place * BLOCK + 0, 1, 2` (`place`: the variant's place in the
report's table). A line chart then draws one near-vertical segment per variant, in its colour, from the
low end to the high end, the variants side by side along the step axis.

A metric's history cannot be rewritten: a report made again whose intervals changed (a sweep given more
seeds) writes every job's into a new block of steps, `generation * GENERATION + ...`, and the view's
cards show only the newest block (src.tracking.ui_view reads it from the experiment tag
GENERATION_TAG). A report made again over unchanged intervals writes nothing. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from src.tracking.store import Store

SECTION = "intervals"
BLOCK = 100  # steps from one variant's interval to the next: the three points 0, 1, 2 look vertical
GENERATION = 100_000  # steps from one generation's block to the next (room for 1,000 variants)
# On the experiment: "<generation>:<variants>", what the view's cards show; on each job run, what it holds.
GENERATION_TAG = "mlflow.normsweep.intervals"
RUN_TAG = "mlflow.normsweep.intervals"

Interval = tuple[float, float, float]  # low, estimate, high


def interval_key(result: str) -> str:
    """`intervals/<result>`: the chart of `result`'s intervals, one segment per variant."""
    return f"{SECTION}/{result}"


def shown_generation(tags: Mapping[str, str]) -> tuple[int, int] | None:
    """(generation, number of variants) the experiment's interval charts show, from its tags (None: none yet)."""
    held = tags.get(GENERATION_TAG)
    if not held:
        return None
    generation, _, count = held.partition(":")
    return int(generation), int(count)


def x_range(generation: int, count: int) -> dict[str, float]:
    """The steps of one generation's block, half a block beyond its first and last variant."""
    start = generation * GENERATION
    return {"xMin": start + BLOCK / 2, "xMax": start + (count + 0.5) * BLOCK}


def log_job_intervals(
    store: Store,
    experiment_id: str,
    jobs: Iterable[tuple[str, str]],
    intervals: Mapping[str, Mapping[str, Interval]],
    places: Mapping[str, int],
) -> int:
    """Each job run (run id, variant) of a variant in `intervals` (variant -> result -> low, estimate,
    high) gets them as `intervals/<result>` at its `places[variant]` (1, 2, ...); the generation written
    (-1: nothing to write). Runs holding the same already are left as they are; a held interval that
    changed starts a new generation, which every job's run is written into."""
    wanted = {run_id: json.dumps({"place": places[v], **{k: list(x) for k, x in sorted(intervals[v].items())}})
              for run_id, v in jobs if v in intervals}  # fmt: skip
    shown = shown_generation(store.experiment_tags(experiment_id))
    generation = shown[0] if shown else 0
    held = {}
    for run_id in wanted:
        run = store.get_run(run_id)
        held[run_id] = run.data.tags.get(RUN_TAG, "") if run is not None else ""
    mine = {run_id: f"{generation}:{text}" for run_id, text in wanted.items()}
    if shown and any(held[r] and held[r] != mine[r] for r in wanted):
        generation += 1  # a changed interval: every job into a block of its own
        mine = {run_id: f"{generation}:{text}" for run_id, text in wanted.items()}
    todo = [r for r in wanted if held[r] != mine[r]]
    if not todo:
        return -1
    for run_id in todo:
        entry = json.loads(wanted[run_id])
        start = generation * GENERATION + entry.pop("place") * BLOCK
        for i in range(3):  # the low end, the estimate, the high end: one point per step
            store.log_metrics(run_id, {interval_key(k): x[i] for k, x in entry.items()}, step=start + i)
        store.set_tags(run_id, {RUN_TAG: mine[run_id]})
    store.set_experiment_tag(experiment_id, GENERATION_TAG, f"{generation}:{max(places.values(), default=0)}")
    return generation
