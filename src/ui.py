"""`python -m src.ui [overrides]`: open the MLflow UI on the store that training writes to.

The store comes from the composed training config, so `python -m src.ui paths.mlflow_db=/x/mlflow.db`
browses the store that `python -m src.train paths.mlflow_db=/x/mlflow.db` filled.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from src import paths
from src.tracking.store import UI_TRAINING_VIEW, Store, StoreError, redact_uri, sqlite_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.ui", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, this machine only)")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("overrides", nargs="*", help="training config overrides, e.g. paths.mlflow_db=/x/mlflow.db")
    args = parser.parse_args(argv)
    uri = paths.tracking_uri(args.overrides)
    db = sqlite_path(uri)
    try:
        # Checked like a training job's store; an existing SQLite file is upgraded under the store's
        # lock here, not inside the UI's server.
        Store.connect(uri)
    except StoreError as err:
        print(f"ui: {err}", file=sys.stderr)
        return 1
    if db is not None and not db.exists():
        print(f"ui: no MLflow database at {db} yet; the UI starts on an empty store", file=sys.stderr)
    mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or shutil.which("mlflow")
    if mlflow is None:
        print("ui: the mlflow command is not installed (pip install -e .)", file=sys.stderr)
        return 1
    # The query selects MLflow's training view (a fresh browser starts in its GenAI view).
    print(f"MLflow UI for {redact_uri(uri)} at http://{args.host}:{args.port}/#/experiments?{UI_TRAINING_VIEW}", flush=True)
    os.execv(mlflow, [mlflow, "ui", "--backend-store-uri", uri, "--host", args.host, "--port", str(args.port)])
    return 0  # unreachable: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
