"""What the MLflow UI shows when a user opens an experiment from a link that normsweep prints.

MLflow 3.17's UI keeps its view of an experiment (columns, which runs the charts draw, grouping) in
the browser, with one exception a logging client can reach: a *shared view*, an experiment tag
`mlflow.sharedViewState.<key>` holding the view as JSON, applied when the page's address carries
`viewStateShareKey=<key>`. normsweep writes one such view on every experiment it touches, and every
link it prints carries its key and the training view (the UI picks GenAI or model training from the
address or the browser's own toggle, never from an experiment tag):

- every run drawn in the charts (MLflow's default draws the first 10, and a sweep's parent run
  takes one of them: a whole variant of a 12-job sweep went missing);
- runs grouped by their `variant` tag (what the sweep varied: `torch_layernorm · post`, written
  whole, src.tracking.variants), so each variant is one colour and its seeds are drawn as a mean
  with a min/max band (the UI's own aggregation);
- the results as columns on first open: test loss, tokens/s, training time, the variant, the seed.

Keys the UI refuses to take from a shared view (which rows are unfolded, pinned or hidden) stay
the browser's. Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from src.tracking.store_uri import is_server, redact_uri
from src.tracking.tags import SEED_TAG, VARIANT_TAG

if TYPE_CHECKING:
    from src.tracking.store import Store

VIEW_KEY = "normsweep"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the UI's own prefix for a shared view
VIEW_TAG = VIEW_TAG_PREFIX + VIEW_KEY
TRAINING_VIEW = {"workflowType": "machine_learning"}  # the UI's GenAI | Model training toggle
GROUP_TAG = VARIANT_TAG  # the run tag that names the variant (src.tracking.variants)
# Final one-off numbers, as the job logs them (src.training.run_life.final_metrics), first the two the study asks.
RESULT_METRICS = ("test_loss", "avg_tokens_per_sec", "train_time_s")
RESULT_TAGS = (VARIANT_TAG, SEED_TAG)
SHOW_ALL_RUNS = "SHOW_ALL"  # the UI's runsHiddenMode that draws every run in the charts


def column(kind: str, name: str) -> str:
    """A runs-table column as the UI names it: kind.`name` (kind: attributes, metrics, params, tags)."""
    return f"{kind}.`{name}`"


def view_state() -> dict[str, object]:
    """The shared view: result columns first, every run charted, runs grouped (and coloured) by variant."""
    return {
        "selectedColumns": [
            *(column("metrics", m) for m in RESULT_METRICS),
            *(column("tags", t) for t in RESULT_TAGS),
            column("attributes", "Dataset"),
            column("attributes", "Description"),
        ],
        "runsHiddenMode": SHOW_ALL_RUNS,
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": GROUP_TAG}]},
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
    }


def publish_view(store: Store, experiment_id: str) -> None:
    """Write the shared view on the experiment (idempotent: unchanged views are not rewritten)."""
    value = json.dumps(view_state(), separators=(",", ":"))
    if store.experiment_tags(experiment_id).get(VIEW_TAG) != value:
        store.set_experiment_tag(experiment_id, VIEW_TAG, value)


def default_workers() -> int:
    """One UI worker per two usable cores: MLflow starts 4, which on a 2-core machine got two of them
    killed at start and kept the UI from answering for about two minutes."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def ui_base(logger: Mapping[str, Any]) -> str:
    """http://host:port of the MLflow UI for the store of `logger` (the config's `logger` node): a
    tracking server is its own UI; a local store is served by `python -m src.ui` at `logger.ui`."""
    uri = str(logger.get("tracking_uri") or "")
    if is_server(uri):
        return redact_uri(uri).rstrip("/")
    ui = logger["ui"]
    return address(str(ui["host"]), int(ui["port"]))


def address(host: str, port: int) -> str:
    """The address a browser uses for a server bound to `host`: every interface means this host's name."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port}"


def ui_link(base: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """An address in the MLflow UI at `base` (http://host:port): the experiment list, an experiment
    in the shared view, or one run's page; always on the training view."""
    if experiment_id is None:
        return f"{base}/#/experiments?{urlencode(TRAINING_VIEW)}"
    if run_id is not None:
        return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{urlencode(TRAINING_VIEW)}"
    query = {**TRAINING_VIEW, "viewStateShareKey": VIEW_KEY}
    return f"{base}/#/experiments/{experiment_id}/runs?{urlencode(query)}"
