"""Wortsman et al.'s LR sensitivity per norm, from an LR sweep's runs (no MLflow needed)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from src.report.judge.stability import by_learning_rate, initial_losses, lr_sensitivity
from src.report.words.stability import sentences

LRS = (1e-4, 1e-3, 1e-2)
START = 10.8


def _runs() -> pd.DataFrame:
    finals = {  # variant -> per seed, the test loss at each learning rate (None: diverged)
        "torch_layernorm": [(5.0, 4.0, 4.5), (5.2, 4.0, 4.4)],
        "no_norm": [(5.0, 4.0, None), (5.0, 4.2, None)],
    }
    rows = [
        (
            f"{v}-{s}-{lr}",
            v,
            s,
            lr,
            "finished" if loss is not None else "diverged",
            math.nan if loss is None else loss,
        )
        for v, seeds in finals.items()
        for s, losses in enumerate(seeds)
        for lr, loss in zip(LRS, losses, strict=True)
    ]
    frame = pd.DataFrame(rows, columns=["run_id", "variant", "seed", "lr", "outcome", "test_loss"])
    return frame.assign(
        family=frame.variant.map({"torch_layernorm": "layernorm", "no_norm": "none"}),
        stopped_at_step=math.nan,
    )


def test_lr_sensitivity_follows_wortsman_et_al() -> None:
    runs = _runs()
    curves = pd.DataFrame(
        [(r, "train/train_loss", step, START + step) for r in runs.run_id for step in (0, 1)],
        columns=["run_id", "metric", "step", "value"],
    )
    initial = initial_losses(curves)
    assert set(initial.values()) == {START}  # the first step's loss, not a later one
    scores = lr_sensitivity(runs, initial).set_index("variant")
    # Per seed: mean over learning rates of min(final, initial) - best final; a diverged run counts at START.
    layernorm = [(5.0 + 4.0 + 4.5) / 3 - 4.0, (5.2 + 4.0 + 4.4) / 3 - 4.0]
    no_norm = [(5.0 + 4.0 + START) / 3 - 4.0, (5.0 + 4.2 + START) / 3 - 4.2]
    assert scores.loc["torch_layernorm", "lr_sensitivity"] == pytest.approx(sum(layernorm) / 2)
    assert scores.loc["no_norm", "lr_sensitivity"] == pytest.approx(sum(no_norm) / 2)
    assert scores.loc["no_norm", "seeds"] == 2 and scores.loc["no_norm", "ci"] > 0
    text = " ".join(sentences(by_learning_rate(runs), scores.reset_index()))
    assert (
        f"LR sensitivity {sum(no_norm) / 2:.3f} ±" in text
        and "no_norm: largest stable learning rate 1.0e-03" in text
    )
