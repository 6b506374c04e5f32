"""A module whose ending is chosen by its argument, for tests/test_warm_python.py: it prints what a
job can see of its start, then ends the way its first argument names."""

import atexit
import os
import signal
import sys
import threading
import time

print(f"torch loaded before: {'torch' in sys.modules}", file=sys.stderr)
print(f"pid {os.getpid()}", file=sys.stderr)
print(f"argv {sys.argv[1:]} cwd {os.getcwd()} main {__name__} file {os.path.basename(sys.argv[0])}")
print(f"stdin {sys.stdin.read()!r} env {os.environ.get('NORMSWEEP_PROBE')} {os.environ.get('HYDRA_FULL_ERROR')} path0 {sys.path[0]}")
how = sys.argv[1]
if how == "exit":
    sys.exit(int(sys.argv[2]))
if how == "raise":
    raise ValueError("the probe's own error")
if how == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
if how == "sleep":
    time.sleep(float(sys.argv[2]))
if how == "ends":  # a normal end: non-daemon threads joined first, then atexit, output flushed last
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
    print("buffered, not flushed")
