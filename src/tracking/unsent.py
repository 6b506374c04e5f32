"""Per-step metrics a tracking server never acknowledged, kept on disk beside the checkpoint.

To a server, a run's per-step metrics go out in the background (src.tracking.tracker); when the
server dies, the steps still queued, the one that failed and the step being logged are lost with the
process. A resumed run starts at its checkpoint, past some of them, and never trains them again, so
their curves keep a hole for good (measured: steps 13-24 of 40 missing after PostgreSQL was killed
under a team server). The tracker writes them here instead, and the next run that opens a record
from the same checkpoint folder sends them to the run they belong to before it logs a step of its
own: each (metric, step) MLflow does not hold yet, so a write that landed after all is not doubled.
Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from src.core.atomic_io import atomic_write
from src.tracking.store import Store

UNSENT_FILE = "unsent_metrics.json"  # in the run's checkpoint folder, beside last.ckpt


def unsent_path(folder: Path | None) -> Path | None:
    return folder / UNSENT_FILE if folder is not None else None


def read(path: Path) -> dict[str, list[dict[str, Any]]]:
    """run id -> its records ({"step": int, "metrics": {key: value}}); {} when none or unreadable."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def keep(path: Path, run_id: str, records: Sequence[tuple[int, Mapping[str, float]]]) -> None:
    """Add `records` (step, metrics) of `run_id` to the file, written whole or not at all; a record
    of a step already kept replaces it (the later write of a step is the one that was meant)."""
    if not records:
        return
    kept = read(path)
    by_step = {int(r["step"]): dict(r["metrics"]) for r in kept.get(run_id, [])}
    for step, metrics in records:
        by_step.setdefault(int(step), {}).update({k: float(v) for k, v in metrics.items()})
    kept[run_id] = [{"step": s, "metrics": m} for s, m in sorted(by_step.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(kept).encode())


def send(store: Store, path: Path | None) -> int:
    """Send what `path` keeps to the runs it names, skipping each (metric, step) the run already has,
    then remove the file; the number of values sent. A run no longer in the store is dropped. If a
    write fails (the server gone again), the file stays for the next try."""
    if path is None or not path.is_file():
        return 0
    sent = 0
    for run_id, records in read(path).items():
        if store.get_run(run_id) is None:
            continue
        keys = {k for r in records for k in r["metrics"]}
        held = {k: {m.step for m in store.metric_history(run_id, k)} for k in keys}
        for record in records:
            step = int(record["step"])
            missing = {k: v for k, v in record["metrics"].items() if step not in held[k]}
            if missing:
                store.log_metrics(run_id, missing, step=step)
                sent += len(missing)
    path.unlink(missing_ok=True)
    return sent
