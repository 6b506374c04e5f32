"""`python -m src.ui [--host H] [--port P] [--workers N] [--access-log] [key=value ...]`: the MLflow UI on
the store that training writes to.

The store comes from the composed training config, so `python -m src.ui paths.mlflow_db=/x/mlflow.db`
browses the store that `python -m src.train paths.mlflow_db=/x/mlflow.db` filled. The address and the
worker count default to `logger.ui` (conf/logger/mlflow.yaml). Before serving, every experiment of
the store gets normsweep's view (src/tracking/ui_view.py), and one link per experiment is printed.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys

from src.core import cli, paths
from src.core.terminal import fit
from src.tracking.store import Store
from src.tracking.store_uri import StoreError, redact_uri, sqlite_path
from src.tracking.team_server import SERVER_ENV
from src.tracking.ui_view import address, default_workers, publish_view, ui_link


def experiment_links(store: Store, base: str) -> list[str]:
    """'<name>: <link>' per experiment with runs, after writing the view on each."""
    lines = []
    for experiment in store.experiments():
        if not store.runs(experiment.experiment_id, most=1):
            continue  # the Default experiment of every store, empty ones
        publish_view(store, experiment.experiment_id)
        lines.append(f"  {experiment.name}: {ui_link(base, experiment.experiment_id)}")
    return lines


def ui_processes(workers: int) -> str:
    """What `serve` starts, counted: MLflow's command, which waits on its server (uvicorn), with `workers`
    worker processes of its own beside it when more than one."""
    count = 2 + (workers if workers > 1 else 0)
    return f"{count} processes ({workers} server worker{'s' if workers != 1 else ''}; MLflow's job runner off)"


def server_log(access_log: bool) -> list[str]:
    """MLflow's options for its server's log: uvicorn's access log (a line per request: opening one
    experiment printed 330) only when asked for; its start and its errors always."""
    return [] if access_log else ["--uvicorn-opts", "--no-access-log"]


def port_in_use(host: str, port: int) -> str | None:
    """Why the UI's server could not listen on host:port (another server holds it, or no such address
    here), naming the field, or None.

    Bound with SO_REUSEADDR, as uvicorn binds: a port left in TIME_WAIT is free, a listening one is not.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"logger.ui.port={port}: cannot listen on {host}:{port} ({err.strerror}; another server holds it)"
            return f"logger.ui.host={host}: cannot listen on {host}:{port} ({err.strerror})"
    return None


def main(argv: list[str] | None = None) -> int:
    made = cli.parser("python -m src.ui", __doc__)
    made.add_argument("--host", default=None, help="bind address (default: logger.ui.host, 127.0.0.1: this machine only)")
    made.add_argument("--port", type=cli.port_option("--port"), default=None, help="default: logger.ui.port (5000)")
    made.add_argument("--workers", type=cli.int_option(1), default=None, help="server processes (default: one per two cores)")
    made.add_argument("--access-log", action="store_true", help="print a line per request the server answers (off: hundreds per page)")
    args = cli.parse(made, argv)
    return cli.run(lambda: serve(args), failures=(StoreError,))


def serve(args: argparse.Namespace) -> int:
    cfg = paths.compose(args.overrides)
    if not cfg.logger.enabled:
        raise paths.ConfigError("logger: tracking is off (logger=none), so there is no store to browse; drop logger=none (the UI serves logger.tracking_uri)")
    if "ui" not in cfg.logger:
        raise paths.ConfigError("logger.ui: this logger option has no UI settings (host, port, workers); add them as conf/logger/mlflow.yaml has")
    ui = cfg.logger.ui
    host = args.host or str(ui.host)
    port = args.port or cli.check_port(ui.port, "logger.ui.port")
    workers = args.workers or (int(ui.workers) if ui.workers else default_workers())
    if workers < 1:
        raise paths.ConfigError(f"logger.ui.workers: must be >= 1 (or null: one per two cores), got {workers}")
    busy = port_in_use(host, port)
    if busy:
        return cli.failed(f"{busy}; choose another (--port / --host, or logger.ui.port=... / logger.ui.host=...)")
    uri = str(cfg.logger.tracking_uri)
    db = sqlite_path(uri)
    fresh = db is not None and not db.exists()
    # Checked like a training job's store; an existing SQLite file is upgraded under the store's
    # lock here, not inside the UI's server.
    store = Store.connect(uri)
    if fresh:
        print(f"ui: no MLflow database at {db} yet; the UI starts on an empty store", file=sys.stderr)
    base = address(host, port)
    links = [] if fresh else experiment_links(store, base)
    # MLflow's job runner (huey consumers for its GenAI jobs) is off, as on a team server: ~2 GiB and 8
    # processes that browsing runs never uses. What starts is MLflow's command and its server's workers.
    for key, value in SERVER_ENV.items():
        os.environ.setdefault(key, value)
    print(*fit([f"MLflow UI for {redact_uri(uri)}: {ui_processes(workers)} at {ui_link(base)}"]), sep="\n", flush=True)
    if links:
        print("experiments (each link opens normsweep's view: every run charted, grouped by variant):", *links, sep="\n", flush=True)
    # MLflow's own server and command, serving its UI with the page opening on the result (src/tracking/ui_app.py).
    command = [sys.executable, "-m", "src.tracking.ui_app", "ui", "--backend-store-uri", uri, "--host", host,
               "--port", str(port), "--workers", str(workers), *server_log(args.access_log)]  # fmt: skip
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(paths.PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.chdir(paths.PROJECT_ROOT)  # the server's workers import the app from the project
    os.execv(sys.executable, command)
    return cli.OK  # unreachable: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
