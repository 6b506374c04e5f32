"""DDP on the CPU: two gloo processes through `python -m src.train` train exactly like one process
with the same global batch, and only rank 0 writes to MLflow.

Not a multirun: Lightning's DDP launcher re-runs the command line for rank 1, and with `-m` that
would start the whole sweep again (docs/scaling.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from mlflow.tracking import MlflowClient

STEPS, GLOBAL_BATCH, SEQ_LEN = 4, 4, 32  # TINY_MODEL's max_steps and context; 4 = 1 x 4 = 2 x 2

# Same windows per step and the same math; only the order of float32 additions differs (DDP
# averages two half-batch gradients where one process averages over four sequences), which
# moves the loss by ~1e-7 relative here. A real difference, such as ranks drawing the same
# windows, changes the loss by ~1e-3 from the first step on. rtol 1e-4 sits between the two.
RTOL = 1e-4


def _run(uri: str, experiment: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, f"{experiment}: expected one MLflow run (rank 0 only), got {len(runs)}"
    (run,) = runs
    history = sorted(client.get_metric_history(run.info.run_id, "train/train_loss"), key=lambda m: m.step)
    return run, history


@pytest.mark.slow
def test_two_ranks_match_one_process_and_only_rank_zero_logs(
    tiny_overrides: list[str], store: dict[str, str]
) -> None:
    common = [o for o in tiny_overrides if not o.startswith("optim.micro_batch_size=")]
    single = run_cli("src.train", *common, "optim.micro_batch_size=4", "experiment_name=single")
    assert single.returncode == 0, single.stderr[-3000:]
    ddp = run_cli(
        "src.train",
        *common,
        "optim.micro_batch_size=2",
        "cluster.accelerator=cpu",
        "cluster.devices=2",
        "cluster.strategy=ddp",
        "experiment_name=ddp",
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]

    one, one_loss = _run(store["uri"], "single")
    two, two_loss = _run(store["uri"], "ddp")
    assert two.info.status == "FINISHED"
    # One point per optimizer step: a second writer would duplicate steps.
    assert [m.step for m in two_loss] == [m.step for m in one_loss] == list(range(1, STEPS + 1))
    np.testing.assert_allclose([m.value for m in two_loss], [m.value for m in one_loss], rtol=RTOL)
    assert two.data.metrics["test_loss"] == pytest.approx(one.data.metrics["test_loss"], rel=RTOL)

    # Throughput counts the tokens of both ranks: steps x global batch x sequence length.
    m = two.data.metrics
    assert m["avg_tokens_per_sec"] * m["train_time_s"] == pytest.approx(STEPS * GLOBAL_BATCH * SEQ_LEN, rel=1e-6)
    assert int(two.data.params["budget.global_batch_size"]) == GLOBAL_BATCH
    assert two.data.params["cluster.devices"] == "2" and two.data.params["cluster.strategy"] == "ddp"
