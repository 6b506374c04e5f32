"""normsweep: which normalization layer should your GPT train with?"""

import os

# Back large CPU tensors with transparent huge pages (read by PyTorch's CPU allocator at its first
# allocation, so it is set before torch is imported). What a page fault costs depends on the host:
# measured 1.6x faster CPU steps on one, 2.4x slower on another; it stays until the speed check holds
# its verdicts under load with the cheaper step too (docs/benchmarks.md, "The C heap").
# THP_MEM_ALLOC_ENABLE=0 opts out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# MLflow's usage telemetry stays off unless the user turns it on (MLFLOW_DISABLE_TELEMETRY=false): a
# run is offline by design (cluster nodes often reach nothing outside), and MLflow starts the client
# that sends it as MLflow is imported, so it is set here, before any module of the package loads MLflow.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# torchmetrics' optional imports (scipy.signal, matplotlib) deferred while Lightning loads it: a finder
# on sys.meta_path that acts only when torchmetrics is imported (src/core/lean_lightning.py).
from src.core import lean_lightning  # noqa: E402

lean_lightning.install()
