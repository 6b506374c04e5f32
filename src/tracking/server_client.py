"""An HTTP tracking server as this project's client meets it: probed once, then bounded.

`probe_server` asks a server one small question in the first seconds (MLflow's own client would
retry for minutes); `bound_http_requests` bounds every later request of the process, so a server
that dies during a run costs at most ~32 s per request; `server_lost` is the one line a run ends
with then. Torch-free; MLflow is imported only by the probe.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from src.core.schema import SERVER_RESTART_S
from src.tracking.retry import causes, retry
from src.tracking.store_uri import CREDENTIAL_ENV, FIELD, StoreError, redact_text, redact_uri
from src.tracking.team_marker import team_server_at

T = TypeVar("T")
PROBE_TIMEOUT_S = 8.0  # per attempt, connect and read (a basic-auth server hashes each password: slow on a busy host)
PROBE_RETRIES = 2  # with 0.5 s and 1 s back-off: at most ~26 s for a server that never answers
PROBE_BACKOFF_S = 0.5
# MLflow's HTTP client during a run, for http(s) stores: 3 tries 10 s each, 0 s then 2 s apart. A
# refused connection (a dead server) fails a request in ~2 s, a server that accepts and never
# answers in ~32 s; a slow one has 10 s per request. The metrics queued in the background
# (src.tracking.tracker) go out as one request per 2 s instead of one per step: measured, one per
# step still cost a step 33% (scripts/bench_tracking.py, docs/benchmarks.md). Set only where the
# user has not set them.
SERVER_CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "2",
}


# A server this process, or the sweep that started it, reached once (pool workers and SLURM tasks
# inherit it): a connection it refuses later is a restart to wait for, not a wrong address.
REACHED_ENV = "NORMSWEEP_SERVER_REACHED"
RESTART_POLL_S = 1.0  # between two tries while a reached server restarts (each try: MLflow's ~2 s of retries)
_given_up: set[str] = set()  # servers that did not come back within SERVER_RESTART_S: not waited for again


class ServerLost(RuntimeError):
    """The tracking server stopped answering during a run; the message names the URI and the cause.

    `what` is the fault alone (which server, doing what, why): a run's own line (src.training.failures)
    adds what became of its run and checkpoint, which only it knows."""

    def __init__(self, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.what = what or message


def bound_http_requests() -> None:
    """Bound MLflow's HTTP retries and timeouts in this process (and the processes it starts)."""
    for name, value in SERVER_CLIENT_ENV.items():
        os.environ.setdefault(name, value)


def server_lost(uri: str, err: BaseException, doing: str) -> ServerLost:
    """One line: which server, what the job was doing, the cause, what became of the run, and what to do."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    status = http_status(text)
    team = team_server_at(uri)  # a team server's own terminal names the cause (its PostgreSQL, its mlflow server)
    if status is not None and status >= 500:  # it answers, with an error: its database (PostgreSQL) is gone
        whose = "its PostgreSQL; the team server's terminal says why" if team else "a team server: its PostgreSQL"
        what = (
            f"{FIELD}={redact_uri(uri)}: the tracking server answered {_short_cause(text, uri)} while {doing}: "
            f"its database stopped answering ({whose})"
        )
        back = "the server and its database are back (a team server: stop it and start it again, make server)"
    else:
        what = f"{FIELD}={redact_uri(uri)}: the tracking server stopped answering while {doing} ({_short_cause(text, uri)})"
        what += "; it is a team server: its terminal says why it stopped" if team else ""
        back = "the server is back"
    if team:
        back = f"the team server is back (stop it if it still runs, and start it again: {team})"
    return ServerLost(
        f"{what}; its MLflow run, if it was opened, stays RUNNING and the checkpoint is kept: once {back}, "
        "re-run the same command to resume",
        what,
    )


def http_status(text: str) -> int | None:
    """The HTTP status an MLflow client error carries in its text (urllib3's `too many 503 error
    responses` once its retries are spent, MLflow's `error code 503`), or None."""
    found = re.search(r"too many (\d{3}) error responses|error code (\d{3})|HTTP (\d{3})", text)
    return int(next(g for g in found.groups() if g)) if found else None


def is_refused(err: BaseException) -> bool:
    """Nothing listens at the server's address (its process stopped): MLflow's client carries the
    refusal only in its text (`... [Errno 111] Connection refused`)."""
    return any(isinstance(node, ConnectionRefusedError) or "Connection refused" in str(node) for node in causes(err))


def mark_reached(uri: str) -> None:
    os.environ[REACHED_ENV] = uri


def ride_out_restart(uri: str, fn: Callable[[], T], doing: str) -> T:
    """`fn`, tried again while a server this process reached refuses connections, for up to
    `SERVER_RESTART_S` (src/core/schema.py); then `ServerLost`, and later calls are not held again.
    A refusal from a server never reached is raised as it is (a wrong address: the caller says so)."""

    def restarting() -> bool:
        return os.environ.get(REACHED_ENV) == uri and uri not in _given_up

    first_refusal: list[float] = []

    def worth_waiting(err: Exception) -> bool:
        if not is_refused(err) or not restarting():
            return False
        first_refusal[:] = first_refusal or [time.monotonic()]
        return time.monotonic() - first_refusal[0] < SERVER_RESTART_S

    try:
        result = retry(fn, int(SERVER_RESTART_S / RESTART_POLL_S) + 2, RESTART_POLL_S, worth_waiting, growth=1.0)
    except Exception as err:
        if is_refused(err) and os.environ.get(REACHED_ENV) == uri:
            _given_up.add(uri)
            raise server_lost(uri, err, doing) from err
        raise
    _given_up.discard(uri)
    return result


def _short_cause(text: str, uri: str) -> str:
    """The reason inside urllib3's nested retry message, e.g. "Connection refused"."""
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower() or "timeout" in text.lower():
        return f"no answer within {PROBE_TIMEOUT_S:.0f} s, {PROBE_RETRIES} retries"
    status = http_status(text)
    if status is not None:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
        return f"HTTP {status} {phrase}"
    said = redact_text(text.replace(uri, redact_uri(uri)))  # MLflow's message quotes the full URL
    if len(said) <= CAUSE_MAX:
        return said
    # Its end holds the reason; cut at a word's start, never inside one.
    tail = said[-CAUSE_MAX:]
    return "..." + (tail.split(" ", 1)[1] if " " in tail else tail)


CAUSE_MAX = 200  # characters of an unrecognised cause kept in a one-line message


class TeamServerDown(StoreError):
    """Nothing answers where a team server of this machine served (src.tracking.team_marker): the
    address is right, the server is down. Still a refusal before anything runs for a training command;
    a failed read for a reading one (src.report)."""


class DatabaseLost(ServerLost):
    """The MLflow server answers, but its database does not: a fault of the store, not of the config."""


def refuse_if_database_lost(uri: str, cause: str) -> None:
    """After the API failed (`cause`): when the server's /health still answers, it is MLflow's server
    with its database gone (PostgreSQL killed under a team server), a fault to wait out, not a wrong
    address; a sweep ended its next job in `config error: ... not as an MLflow tracking server (HTTP 503)`."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        health = http_request(get_default_host_creds(uri), "/health", "GET", max_retries=0, timeout=PROBE_TIMEOUT_S,
                              raise_on_status=False)  # fmt: skip
    except Exception:  # nothing answers: the caller's message says so
        return
    if health.status_code == 200:
        fault = f"{FIELD}={redact_uri(uri)}: the tracking server answers, but its database does not ({cause}, from its API)"
        team = team_server_at(uri)
        fix = (f"it is a team server: its terminal says why; stop it and start it again ({team}), then re-run the same command"
               if team else "restart the database (a team server: stop it and start it again, make server), then re-run the same command")  # fmt: skip
        # `what`: the fault and its fix alone, for a command that records nothing (src.report).
        raise DatabaseLost(f"{fault}; nothing was recorded for this run: {fix}", what=f"{fault}: {fix}")


def probe_server(uri: str) -> None:
    """One small API call with bounded retries: does an MLflow tracking server answer at `uri`?"""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    where = f"{FIELD}={redact_uri(uri)}"

    def ask() -> Any:
        return http_request(
            get_default_host_creds(uri),
            "/api/2.0/mlflow/experiments/search",
            "POST",
            json={"max_results": 1},
            max_retries=0,
            timeout=PROBE_TIMEOUT_S,
            raise_on_status=False,
        )

    # Our own attempts, one request each: urllib3's retries count connect and read failures apart,
    # so their total time is not bounded by one number. Every failure to get an answer (connection
    # refused, DNS, TLS, a timeout: MLflow wraps them all in one type) is worth another try.
    try:
        response = ride_out_restart(uri, lambda: retry(ask, PROBE_RETRIES + 1, PROBE_BACKOFF_S, lambda err: True),
                                    "starting the next job")  # fmt: skip
    except ServerLost:  # a server this sweep reached did not come back: a fault, not a config error
        raise
    except Exception as err:
        cause = _short_cause(str(err), uri)
        refuse_if_database_lost(uri, cause)
        team = team_server_at(uri)
        if team:
            raise TeamServerDown(
                f"{where}: the team server there does not answer ({cause}); its terminal says why it stopped. Start "
                f"it again ({team}; `make server` for the default one, docs/store.md), then re-run the same command"
            ) from err
        raise StoreError(
            f"{where}: no MLflow tracking server answers there ({cause}); start it "
            "(`mlflow server --backend-store-uri ...`), fix the address, or drop the override to track "
            "in the local SQLite store"
        ) from err
    status = response.status_code
    if status in (401, 403):
        raise StoreError(
            f"{where}: the tracking server refused the credentials (HTTP {status}); "
            f"set {CREDENTIAL_ENV[0]} and {CREDENTIAL_ENV[1]} (or {CREDENTIAL_ENV[2]})"
        )
    if status != 200:
        refuse_if_database_lost(uri, f"HTTP {status}")
        raise StoreError(
            f"{where}: a server answers there, but not as an MLflow tracking server "
            f"(HTTP {status} from /api/2.0/mlflow/experiments/search)"
        )
    mark_reached(uri)  # a refusal from it later is a restart (ride_out_restart)
