"""File a sequential sweep's looks on its parent run: the one place that writes them to MLflow.

Every look (round, seeds so far per variant, each comparison's interval and decision) goes into
one JSON artifact, rewritten after each look, so the parent run always holds the whole sequence;
the stopping reason and the verdicts also go into tags, readable in the runs table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from src.tracking.store import Store

LOOKS_ARTIFACT = "sweep/looks.json"
SUMMARY_ARTIFACT = "sweep/sequential.txt"
STOP_TAG = "sequential.stop_reason"
LOOKS_TAG = "sequential.looks"


def record_looks(store: Store, run_id: str, looks: Sequence[Mapping[str, Any]]) -> None:
    store.log_text(run_id, json.dumps(list(looks), indent=1), LOOKS_ARTIFACT)
    store.set_tags(run_id, {LOOKS_TAG: str(len(looks))})


def record_stop(store: Store, run_id: str, reason: str, summary: str) -> None:
    store.set_tags(run_id, {STOP_TAG: reason})
    store.log_text(run_id, summary, SUMMARY_ARTIFACT)


def read_looks(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The looks filed on a parent run ([] when it has none)."""
    try:
        return json.loads(store.read_text(run_id, LOOKS_ARTIFACT))
    except Exception:  # no such artifact: the sweep never looked
        return []


def latest_looks(store: Store, experiment_id: str) -> tuple[str, list[dict[str, Any]]] | None:
    """The latest sequential sweep of the experiment that looked: its parent run and its looks."""
    runs = store.runs(experiment_id, f"tags.`{LOOKS_TAG}` LIKE '%'", ["attributes.start_time DESC"], most=1)
    if not runs:
        return None
    return runs[0].info.run_id, read_looks(store, runs[0].info.run_id)
