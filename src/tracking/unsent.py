"""Per-step metrics a tracking server never acknowledged, kept on disk beside the checkpoint.

To a server, a run's per-step metrics go out in the background (src.tracking.tracker); when the
server dies, the steps still queued, the one that failed and the step being logged are lost with the
process. A resumed run starts at its checkpoint, past some of them, and never trains them again, so
their curves keep a hole for good (measured: steps 13-24 of 40 missing after PostgreSQL was killed
under a team server). The tracker writes them here instead, each with the time it was logged, and
the next run that opens a record from the same checkpoint folder sends them to the run they belong
to before it logs a step of its own: each (metric, step) MLflow does not hold yet, at its original
time, so a write that landed after all is not doubled and the curve's wall-clock axis stays true.

Nothing kept here is thrown away: a file cut short (a full disk, a copy interrupted) gives up every
record it still holds whole and is itself kept beside the checkpoint under another name; the records
of a run this store does not hold (another store, a run deleted in MLflow) are kept in `replaced/`,
beside the checkpoint a new run moves there (src.tracking.run_plan, the owner of what a run keeps
aside). Each is said in one line. Torch-free.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from src.core.atomic_io import atomic_write
from src.tracking.store import Store

UNSENT_FILE = "unsent_metrics.json"  # in the run's checkpoint folder, beside last.ckpt
UNREADABLE_SUFFIX = ".unreadable"  # unsent_metrics.json.unreadable: a file cut short, kept as it was
REPLACED_FOLDER = "replaced"  # beside last.ckpt: what belongs to runs a new run replaced

# One run's list inside the file: `"<run id>": [` (the file is one JSON object of such lists).
_RUN_LIST = re.compile(r'"([^"\\]+)"\s*:\s*\[')

Record = dict[str, Any]  # {"step": int, "timestamp": int ms (absent in older files), "metrics": {key: value}}


def unsent_path(folder: Path | None) -> Path | None:
    return folder / UNSENT_FILE if folder is not None else None


def kept_for(folder: Path, run_id: str) -> Path:
    """Where the unsent metrics of `run_id`, a run the store does not hold, are kept: beside the
    checkpoint a new run moved aside (`replaced/<run id>.ckpt`)."""
    return folder / REPLACED_FOLDER / f"{run_id}.{UNSENT_FILE}"


@dataclass
class Contents:
    """What an unsent file holds: run id -> its records; `whole` is False when the file was cut short
    or damaged and only the records read here survived."""

    runs: dict[str, list[Record]] = field(default_factory=dict)
    whole: bool = True


def _valid(record: object) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("step"), int)
        and isinstance(record.get("metrics"), dict)
        and all(isinstance(v, (int, float)) for v in record["metrics"].values())
    )


def _salvage(text: str) -> dict[str, list[Record]]:
    """The records of a damaged file that are still whole: each run's list read record by record up
    to the first that does not parse."""
    decoder = json.JSONDecoder()
    runs: dict[str, list[Record]] = {}
    for found in _RUN_LIST.finditer(text):
        at, records = found.end(), []
        while True:
            at = len(text) - len(text[at:].lstrip(" \n\t,"))
            try:
                record, at = decoder.raw_decode(text, at)
            except ValueError:
                break
            if not _valid(record):
                break
            records.append(record)
        if records:
            runs.setdefault(found.group(1), []).extend(records)
    return runs


def read(path: Path) -> Contents:
    """The file's runs and records; none when there is no file."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return Contents()
    try:
        found = json.loads(text)
    except ValueError:
        return Contents(_salvage(text), whole=False)
    if not isinstance(found, dict) or not all(isinstance(v, list) and all(map(_valid, v)) for v in found.values()):
        return Contents(_salvage(text), whole=False)
    return Contents(found)


def set_aside(path: Path) -> Path:
    """Keep a damaged unsent file, as it is, beside itself under a name no later file takes (written
    whole before the original goes: a crash between the two leaves both, never neither)."""
    to, n = path.with_name(path.name + UNREADABLE_SUFFIX), 1
    while to.exists():
        n += 1
        to = path.with_name(f"{path.name}{UNREADABLE_SUFFIX}.{n}")
    atomic_write(to, path.read_bytes())
    path.unlink()
    return to


def _write(path: Path, runs: Mapping[str, list[Record]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(runs).encode())


def keep(path: Path, run_id: str, records: Sequence[tuple[int, int | None, Mapping[str, float]]]) -> None:
    """Add `records` (step, timestamp in ms or None for now, metrics) of `run_id` to the file, written
    whole or not at all; a record of a step already kept replaces its values (the later write of a
    step is the one that was meant). A damaged file is first set aside (its readable records kept)."""
    if not records:
        return
    kept = read(path)
    if not kept.whole:
        set_aside(path)
    by_step: dict[int, Record] = {int(r["step"]): dict(r) for r in kept.runs.get(run_id, [])}
    for step, timestamp, metrics in records:
        record = by_step.setdefault(int(step), {"step": int(step), "metrics": {}})
        record["timestamp"] = int(timestamp if timestamp is not None else time.time() * 1000)
        record["metrics"] = {**record["metrics"], **{k: float(v) for k, v in metrics.items()}}
    kept.runs[run_id] = [by_step[s] for s in sorted(by_step)]
    _write(path, kept.runs)


@dataclass
class Sent:
    """What `send` did: the values sent, and one line for each thing kept on disk instead."""

    values: int = 0
    notes: list[str] = field(default_factory=list)
    cut: bool = False  # the file was cut short: its runs' curves may keep a gap (`missing_steps`)


def is_deleted(run: Any) -> bool:
    """The run is in the store but deleted in MLflow (the UI's Delete, `mlflow runs delete`): it takes
    no write until it is restored (`mlflow runs restore`)."""
    return run is not None and run.info.lifecycle_stage == "deleted"


def can_take(run: Any) -> bool:
    """The store holds the run and it can take metrics."""
    return run is not None and not is_deleted(run)


def send(store: Store, path: Path | None) -> Sent:
    """Send what `path` keeps to the runs it names, skipping each (metric, step) the run already has,
    then remove the file. Nothing is dropped: a run the store does not hold (or holds deleted) keeps
    its records in `replaced/<run id>.unsent_metrics.json`; a damaged file sends what it still holds
    whole and is kept as `unsent_metrics.json.unreadable`. If a write fails (the server gone again),
    the file stays for the next try."""
    done = Sent()
    if path is None or not path.is_file():
        return done
    kept = read(path)
    for run_id, records in kept.runs.items():
        run = store.get_run(run_id)
        if not can_take(run):
            aside = kept_for(path.parent, run_id)
            _write(aside, {**read(aside).runs, run_id: records})
            why = "was deleted in MLflow" if is_deleted(run) else f"is not in {store}"
            done.notes.append(
                f"the {len(records)} step(s) of run {run_id} its tracking server never acknowledged are kept in "
                f"{aside}: the run {why}"
            )
            continue
        done.values += _send_run(store, run_id, records)
    if kept.whole:
        path.unlink(missing_ok=True)
    else:
        aside, done.cut = set_aside(path), True
        steps = sum(len(r) for r in kept.runs.values())
        done.notes.append(
            f"{path} was cut short or damaged: the {steps} step(s) still readable in it were sent; "
            f"the file is kept as {aside} for what could not be read"
        )
    return done


def _send_run(store: Store, run_id: str, records: Sequence[Record]) -> int:
    keys = {k for r in records for k in r["metrics"]}
    held = {k: {m.step for m in store.metric_history(run_id, k)} for k in keys}
    sent = 0
    for record in records:
        step = int(record["step"])
        missing = {k: v for k, v in record["metrics"].items() if step not in held[k]}
        if missing:
            store.log_metrics(run_id, missing, step=step, timestamp_ms=record.get("timestamp"))
            sent += len(missing)
    return sent


def missing_steps(steps: Sequence[int]) -> list[int]:
    """The steps a curve logged every k steps lacks between its first and last (k: its smallest gap)."""
    held = sorted(set(steps))
    if len(held) < 2:
        return []
    every = min(b - a for a, b in pairwise(held))
    return sorted(set(range(held[0], held[-1] + 1, every)) - set(held))


def step_ranges(steps: Sequence[int]) -> str:
    """`[12, 13, 14, 20]` -> `12-14, 20`."""
    out: list[str] = []
    for step in sorted(steps):
        if out and out[-1].split("-")[-1] == str(step - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{step}"
        else:
            out.append(str(step))
    return ", ".join(out)
