"""A team tracking server on this machine: a PostgreSQL cluster and `mlflow server` on top of it.

    python -m src.tracking.team_server                 # (make server) state in .team_server/, port 5050
    python -m src.tracking.team_server --port 5060 --dir /data/mlflow-team

Many writers at once (sweeps from several nodes, a pool's workers) need a database server, not a
SQLite file: this starts PostgreSQL (Debian's `postgresql` package; `initdb`/`pg_ctl` are found on
PATH or in /usr/lib/postgresql/<version>/bin) listening on 127.0.0.1 only, creates the `mlflow`
database, and runs `mlflow server --backend-store-uri postgresql+psycopg://...` with one worker
and the artifacts in the state folder (the `server` extra installs the psycopg driver). The data
survive a restart: the same command reuses the cluster. PostgreSQL refuses to run as root, so as
root the cluster belongs to an unprivileged user (`nobody`) and lives in a folder that user owns.

The tests start the same thing on free ports (`TeamServer.start`). Torch-free.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from src.core import cli
from src.core.atomic_io import try_hold
from src.core.paths import PROJECT_ROOT, unwritable_reason
from src.core.ports import free_port, listens
from src.core.process_group import alive, group_members, stop_group
from src.core.terminal import say
from src.tracking.server_guard import postmaster_pid, stop
from src.tracking.team_marker import publish

DB_USER = "normsweep"  # the cluster's superuser; trust authentication on 127.0.0.1 only
DB_NAME = "mlflow"
RUN_AS_WHEN_ROOT = "nobody"
START_WAIT_S = 120.0  # the first start migrates a new database (MLflow's ~70 schema steps)
DEFAULT_PORT = 5050  # beside `make ui` on 5000
DEFAULT_PG_PORT = 5433  # beside a system PostgreSQL on 5432; backups (pg_dump) connect here
# Tracking only: no job-consumer processes for MLflow's GenAI features (seconds of start, ~GBs).
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
DEFAULT_DIR = PROJECT_ROOT / ".team_server"


class ServerSetupError(RuntimeError):
    """PostgreSQL or the MLflow server cannot be started; the message says what to install or fix."""


class FolderInUse(ServerSetupError):
    """Another team server holds the state folder: nothing of it may be started or stopped from here."""


FOLDER_LOCK = "team_server.lock"  # held by the running team server for its lifetime (src.core.atomic_io)
FOLDER_OWNER = "team_server.pid"  # its pid and address, for the refusal of a second one
MLFLOW_GROUP = "mlflow-server.pgid"  # the running `mlflow server`'s process group, for a restart after a SIGKILL


def pg_tool(name: str) -> str:
    """A PostgreSQL server program: on PATH, else the newest in Debian's /usr/lib/postgresql/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[-3]))
    if candidates:
        return candidates[-1]
    raise ServerSetupError(
        f"PostgreSQL's `{name}` is not installed (looked on PATH and in /usr/lib/postgresql/*/bin); "
        "install it: sudo apt-get install postgresql"
    )


def _as_owner(cmd: list[str]) -> list[str]:
    """`cmd` as the cluster's owner: PostgreSQL refuses to run as root."""
    return ["runuser", "-u", RUN_AS_WHEN_ROOT, "--", *cmd] if os.geteuid() == 0 else cmd


def _run(cmd: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(_as_owner(cmd), capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ServerSetupError(f"{what} failed: {' / '.join(tail)}" + (f"; its log: {log}" if log else ""))


@dataclass
class TeamServer:
    """A PostgreSQL cluster in `pgdata` and an `mlflow server` process on 127.0.0.1:`port`."""

    state_dir: Path
    port: int
    pg_port: int
    fast: bool = False  # tests: no fsync (a crash of the machine may lose the last writes)
    mlflow_proc: subprocess.Popen | None = field(default=None, repr=False)
    folder_lock: FileLock | None = field(default=None, repr=False)
    guard: subprocess.Popen | None = field(default=None, repr=False)  # src/tracking/server_guard.py
    postgres_started: bool = field(default=False, repr=False)  # by this process: only then does it stop it
    # Taken when PostgreSQL has started, not when the watch begins: a postmaster killed in between was
    # never watched, and the team server ran on over a dead database.
    postmaster: int | None = field(default=None, repr=False)

    # --- the state folder: one team server at a time ---

    def take_folder(self) -> None:
        """Hold the state folder's lock for this process's life, before anything is started: a second
        team server on the same folder failed on PostgreSQL's postmaster.pid, and its cleanup then
        stopped the first one's PostgreSQL (or, with other ports, started a second cluster on the data)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.folder_lock = try_hold(self.state_dir / FOLDER_LOCK)
        owner = self.state_dir / FOLDER_OWNER
        if self.folder_lock is None:
            who = owner.read_text().strip() if owner.exists() else "pid unknown"
            raise FolderInUse(
                f"a team server already runs on {self.state_dir} ({who}); it was left untouched: use it, "
                "stop it (Ctrl+C or kill <pid>), or start this one with another --dir"
            )
        owner.write_text(f"pid {os.getpid()}, {self.uri}, PostgreSQL on 127.0.0.1:{self.pg_port}\n")
        self.stop_leftovers()

    def stop_leftovers(self) -> None:
        """The servers of a team server that died on this folder without stopping them (SIGKILL before
        its guard existed, or the guard killed too): said in one line, with their logs, and stopped. They
        held the ports (`choose another --port` was the advice) and the cluster (`pg_ctl: another
        server might be running`)."""
        left = []
        postmaster = postmaster_pid(self.pgdata)
        if postmaster is not None:
            left.append(f"PostgreSQL (pid {postmaster})")
        group_file = self.state_dir / MLFLOW_GROUP
        recorded = group_file.read_text().strip() if group_file.is_file() else ""
        pgid = int(recorded) if recorded.isdigit() else None
        # The group's processes that are still `mlflow server` or its uvicorn (a group id can be reused).
        members = [p for p in group_members(pgid) if b"mlflow" in _cmdline(p) or b"uvicorn" in _cmdline(p)] if pgid else []
        if members:
            left.append(f"mlflow server (pids {', '.join(map(str, members))})")
        if left:
            say(f"[normsweep] {self.state_dir}: {' and '.join(left)} of a team server that died were still running; "
                f"stopping them (their logs: {self.pgdata / 'server.log'}, {self.state_dir / 'mlflow-server.log'})")
            stop([pgid] if members and pgid is not None else [], [self.pgdata])
        group_file.unlink(missing_ok=True)

    # --- the guard: the servers end with this process, however it ends ---

    def start_guard(self) -> None:
        """Start src/tracking/server_guard.py, which stops what it is told of when this process dies."""
        if self.guard is None or self.guard.poll() is not None:
            self.guard = subprocess.Popen(
                [sys.executable, "-m", "src.tracking.server_guard"], stdin=subprocess.PIPE, text=True,
                cwd=PROJECT_ROOT, start_new_session=True,
            )  # fmt: skip

    def tell_guard(self, line: str) -> None:
        if self.guard is not None and self.guard.stdin is not None:
            with contextlib.suppress(OSError):  # a guard already gone: nothing more it can do
                self.guard.stdin.write(line + "\n")
                self.guard.stdin.flush()

    def stop_guard(self) -> None:
        if self.guard is not None:
            with contextlib.suppress(OSError):
                assert self.guard.stdin is not None
                self.guard.stdin.close()
            self.guard.wait()
            self.guard = None

    def check_ports(self) -> None:
        """Both ports free, before either server starts: a taken one made `mlflow server` exit at once
        (`mlflow server exited (0)`, the reason only in its log) or PostgreSQL fail to start."""
        for option, port in (("--port", self.port), ("--pg-port", self.pg_port)):
            if listens(port):
                raise ServerSetupError(
                    f"{option} {port}: something already listens on 127.0.0.1:{port} (another server, or a team "
                    f"server on another --dir): choose another {option}"
                )

    def release_folder(self) -> None:
        if self.folder_lock is not None:
            self.folder_lock.release()
            self.folder_lock = None

    @property
    def pgdata(self) -> Path:
        return self.state_dir / "pgdata"

    @property
    def artifacts(self) -> Path:
        return self.state_dir / "artifacts"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def backend_uri(self) -> str:
        # No user in the URI (nothing that looks like a credential); libpq reads PGUSER (PGPASSWORD).
        return f"postgresql+psycopg://127.0.0.1:{self.pg_port}/{DB_NAME}"

    # --- PostgreSQL ---

    def start_postgres(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # the owner must reach and own its folder
            os.chmod(self.state_dir, 0o755)
            self.pgdata.mkdir(exist_ok=True)
            shutil.chown(self.pgdata, RUN_AS_WHEN_ROOT)
        new = not (self.pgdata / "PG_VERSION").exists()
        if new:
            _run([pg_tool("initdb"), "-D", str(self.pgdata), "-U", DB_USER, "--auth=trust", "-E", "UTF8",
                  *(["--no-sync"] if self.fast else [])], "initdb")  # fmt: skip
        self.start_guard()
        self.tell_guard(f"postgres {self.pgdata}")  # read at the guard's stop: a cluster half started is stopped too
        options = f"-p {self.pg_port} -k {self.pgdata} -c listen_addresses=127.0.0.1"
        if self.fast:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try:
            _run([pg_tool("pg_ctl"), "-D", str(self.pgdata), "-l", str(self.pgdata / "server.log"), "-w", "-t", "60",
                  "-o", options, "start"], "starting PostgreSQL", log=self.pgdata / "server.log")  # fmt: skip
        except ServerSetupError:
            self.tell_guard(f"forget postgres {self.pgdata}")  # a cluster that runs is another's: not to be stopped
            raise
        self.postgres_started = True
        self.postmaster = postmaster_pid(self.pgdata)
        if new:
            _run([pg_tool("createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", DB_USER, DB_NAME], "createdb")

    def stop_postgres(self) -> None:
        """Stop the cluster this process started (a cluster it failed to start is another's, or none)."""
        if not self.postgres_started:
            return
        with contextlib.suppress(ServerSetupError):
            _run([pg_tool("pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"], "stopping PostgreSQL")
        self.tell_guard(f"forget postgres {self.pgdata}")
        self.postgres_started = False

    # --- the MLflow server ---

    def start_mlflow(self, log: Path | None = None) -> None:
        """Start `mlflow server` (one worker) and wait until it answers."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", self.backend_uri,
            "--artifacts-destination", str(self.artifacts),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip
        out = open(log or self.state_dir / "mlflow-server.log", "ab")  # noqa: SIM115 - the child keeps it
        # Its own process group: stopping it stops uvicorn's workers too.
        env = {**os.environ, **SERVER_ENV, "PGUSER": DB_USER}
        self.start_guard()
        self.mlflow_proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.tell_guard(f"group {self.mlflow_proc.pid}")
        (self.state_dir / MLFLOW_GROUP).write_text(f"{self.mlflow_proc.pid}\n")
        self.wait_ready()
        # Clients that find it dead later say to start it again, with this command (src.tracking.team_marker).
        publish(self.uri, f"python -m src.tracking.team_server --dir {self.state_dir} --port {self.port} --pg-port {self.pg_port}")

    def wait_ready(self, wait_s: float = START_WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.mlflow_proc is not None and self.mlflow_proc.poll() is not None:
                raise ServerSetupError(f"mlflow server exited ({self.mlflow_proc.returncode}); see {self.state_dir}/mlflow-server.log")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                if response.status == 200:
                    return
            time.sleep(0.2)
        raise ServerSetupError(f"mlflow server did not answer at {self.uri} within {wait_s:.0f} s")

    def kill_mlflow(self, sig: int = signal.SIGKILL) -> None:
        """Stop the MLflow server (SIGKILL: as if its machine died); PostgreSQL keeps the data."""
        if self.mlflow_proc is not None:
            # The whole group, even when its leader has died; SIGKILL after the grace: uvicorn waits
            # for a request held by a dead database.
            stop_group(self.mlflow_proc, sig)
            self.tell_guard(f"forget group {self.mlflow_proc.pid}")
            (self.state_dir / MLFLOW_GROUP).unlink(missing_ok=True)
        self.mlflow_proc = None

    # --- both ---

    @classmethod
    def start(cls, state_dir: Path | None = None, port: int | None = None, fast: bool = False) -> TeamServer:
        """PostgreSQL and the MLflow server on free ports (or `port`); as root the state folder is
        a new one under /tmp, where the unprivileged owner of the cluster can reach it."""
        if state_dir is None:
            state_dir = Path(tempfile.mkdtemp(prefix="normsweep-team-server-"))
        server = cls(state_dir, port or free_port(), free_port(), fast=fast)
        server.take_folder()
        try:
            server.start_postgres()
            server.start_mlflow()
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        self.kill_mlflow(signal.SIGTERM)
        self.stop_postgres()
        self.stop_guard()
        self.release_folder()


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _stop_as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (kill, systemd, a scheduler) stops the team server as Ctrl+C does: both servers and the
    folder's lock; otherwise PostgreSQL and `mlflow server` were left running, adopted by init."""
    raise KeyboardInterrupt


WATCH_S = 1.0  # how often the team server looks at its three processes


def watch(server: TeamServer) -> str:
    """Wait while `mlflow server`, PostgreSQL and the guard all run; the line saying which one ended.
    Any of them gone ends the team server (its `finally` stops the others): an MLflow server over a
    dead database answered /health 200 while its API answered 503, and one unguarded ran on silently."""
    assert server.mlflow_proc is not None
    postmaster = server.postmaster
    again = "then start the team server again (the same command: the same data)"
    while True:
        code = server.mlflow_proc.poll()
        if code is not None:
            how = f"signal {-code}" if code < 0 else f"status {code}"
            return f"error: mlflow server exited by itself ({how}); PostgreSQL stopped too; see {server.state_dir / 'mlflow-server.log'}, {again}"
        if postmaster is not None and not alive(postmaster):
            server.postgres_started = False  # nothing left to stop
            return (f"error: PostgreSQL (pid {postmaster}) stopped by itself; mlflow server stopped too (it cannot record "
                    f"without it); see {server.pgdata / 'server.log'}, {again}")  # fmt: skip
        if server.guard is not None and server.guard.poll() is not None:
            return (f"error: the team server's guard (pid {server.guard.pid}) stopped by itself, so a kill of this process "
                    f"would leave both servers running; both stopped, {again}")  # fmt: skip
        time.sleep(WATCH_S)


def serve(server: TeamServer) -> str:
    """Start both servers and wait for `mlflow server` to end; the line saying why it ended. The
    servers are stopped on every way out (Ctrl+C, SIGTERM, a failed start)."""
    server.take_folder()  # before anything is started: a refusal touches nothing
    try:
        server.check_ports()  # after the folder's lock: a second server on one folder is said as such
        server.start_postgres()
        server.start_mlflow()
        say(f"[normsweep] team server at {server.uri} (PostgreSQL on 127.0.0.1:{server.pg_port}, data in {server.pgdata}, "
            f"artifacts in {server.artifacts}); point a sweep at it with logger.tracking_uri={server.uri}; "
            "Ctrl+C (or SIGTERM) stops both")
        return watch(server)
    except KeyboardInterrupt:
        return "[normsweep] team server stopped (PostgreSQL and mlflow server)"
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser("python -m src.tracking.team_server", __doc__.split("\n\n")[0], overrides=None)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where the database and artifacts live")
    parser.add_argument("--port", type=cli.port_option("--port"), default=DEFAULT_PORT, help="the MLflow server's port on 127.0.0.1")
    parser.add_argument("--pg-port", type=cli.port_option("--pg-port"), default=DEFAULT_PG_PORT, help="PostgreSQL's port on 127.0.0.1")
    args = parser.parse_args(argv)
    if args.port == args.pg_port:
        parser.error(f"--port and --pg-port are both {args.port}: the MLflow server and PostgreSQL need a port each")
    problem = unwritable_reason(args.dir)
    if problem:  # the database, the artifacts and the logs live there
        parser.error(f"--dir {args.dir}: {problem}")
    server = TeamServer(args.dir.resolve(), args.port, args.pg_port)
    signal.signal(signal.SIGTERM, _stop_as_ctrl_c)
    try:
        said = serve(server)
    except ServerSetupError as err:
        raise SystemExit(f"error: {err}") from None
    if said.startswith("error:"):
        raise SystemExit(said)
    print(said, flush=True)


if __name__ == "__main__":
    main()
