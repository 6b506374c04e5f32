"""File a sequential sweep's looks on its parent run: the one place that writes them to MLflow.

Every look (round, seeds so far per variant, each comparison's interval and decision) goes into
one JSON artifact, rewritten after each look, so the parent run always holds the whole sequence;
the stopping reason and the verdicts also go into tags, readable in the runs table.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from src.tracking.store import open_client

LOOKS_ARTIFACT = "sweep/looks.json"
SUMMARY_ARTIFACT = "sweep/sequential.txt"
STOP_TAG = "sequential.stop_reason"
LOOKS_TAG = "sequential.looks"


def record_looks(tracking_uri: str, run_id: str, looks: Sequence[Mapping[str, Any]]) -> None:
    client = open_client(tracking_uri)
    client.log_text(run_id, json.dumps(list(looks), indent=1), LOOKS_ARTIFACT)
    client.set_tag(run_id, LOOKS_TAG, str(len(looks)))


def record_stop(tracking_uri: str, run_id: str, reason: str, summary: str) -> None:
    client = open_client(tracking_uri)
    client.set_tag(run_id, STOP_TAG, reason)
    client.log_text(run_id, summary, SUMMARY_ARTIFACT)


def read_looks(tracking_uri: str, run_id: str) -> list[dict[str, Any]]:
    """The looks filed on a parent run ([] when it has none)."""
    client = open_client(tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, LOOKS_ARTIFACT, tmp)
        except Exception:  # no such artifact: the sweep never looked
            return []
        return json.loads(Path(path).read_text())
