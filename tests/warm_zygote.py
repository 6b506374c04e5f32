"""The warm interpreter behind tests/warm_python.py: `python tests/warm_zygote.py SOCKET`.

It imports what every `python -m src.train` imports (torch, Lightning, MLflow's store, Hydra, and
the report's pandas, SciPy and Matplotlib), in the order a job does, then forks one process per
request. Each request is served by a fork (A) that forks the job (B) and reports B's pid, then its
wait status, on the request's connection: the test cannot wait on a process it did not start.

B is the job: its stdin is /dev/null, its stdout and stderr the request's files, its working folder,
environment and argv the request's; it runs the module as `python -m` runs it (`runpy`, as __main__)
and leaves through this script's top level, so it exits as any interpreter does (non-daemon threads
joined, `atexit` run, an uncaught exception printed, SystemExit's code as its status).
"""

import importlib
import json
import os
import runpy
import signal
import socket
import sys
import threading

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout, as `python -m` from it
PRELOAD = [
    "src",  # first, as in `python -m src.train`: it installs the finder that defers torchmetrics' optional imports
    "hydra",
    "torch",
    "torch._dynamo",  # AdamW's constructor imports it
    "lightning.pytorch",
    "mlflow.store.tracking.sqlalchemy_store",
    "pandas",  # the report a sweep ends with
    "scipy.stats",
    "matplotlib",
]
for name in PRELOAD:  # in the order a job imports them
    importlib.import_module(name)

# A fork copies only the thread that forks: a Python thread started by an import (none is, today)
# would be missing in every job, holding whatever lock it held. Said, and the tests start cold
# processes. The libraries' native threads (OpenBLAS's pool, pyarrow's jemalloc) stop and restart
# around a fork by their own pthread_atfork handlers.
threads = threading.active_count()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(16)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the A forks are reaped by the kernel
print(json.dumps({"threads": threads}), flush=True)
if threads != 1:
    sys.exit(3)

while True:
    conn, _ = listener.accept()
    if os.fork() != 0:
        conn.close()
        continue
    # A: one request.
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # A waits for B; B starts with the default, as a cold job does
    request = json.loads(conn.makefile("r").readline())
    job = os.fork()
    if job != 0:
        conn.sendall(f"{job}\n".encode())
        _, status = os.waitpid(job, 0)
        conn.sendall(f"{status}\n".encode())
        os._exit(0)
    # B: the job.
    conn.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # where `python -m` looks first
    sys.argv = [sys.argv[0], *request["args"]]  # runpy puts the module's file in argv[0]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    sys.exit(0)  # the module returned: status 0, through the interpreter's own exit
