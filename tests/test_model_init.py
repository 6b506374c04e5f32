"""`model.init`: how the GPT's weights start, recorded, fingerprinted and swept like any other key;
and what a re-run says of the runs recorded before the key existed (all of them GPT-2's init)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import run_sweep, training_runs
from mlflow.tracking import MlflowClient
from torch import nn

from src.core.paths import ConfigError, compose
from src.core.schema import ModelInit
from src.model.gpt import RESIDUAL_PROJECTIONS, GPTConfig, GPTModel
from src.report.judge.study_match import study_code
from src.report.words.study_setting import code_line
from src.tracking.code import CodeState
from src.tracking.identity import Identity, fingerprint
from src.tracking.run_plan import decide_job
from src.tracking.store import Store
from src.tracking.sweep import CODE_FINGERPRINT_TAG, FINGERPRINT_TAG, REQUIRED_FINAL_METRICS

SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 3, "vocab_size": 97}


def _model(init: str, seed: int = 0) -> GPTModel:
    torch.manual_seed(seed)
    return GPTModel(GPTConfig(**SMALL, init=init))


def test_study_init_is_pytorchs_constructors_untouched() -> None:
    # The study's script seeds, then builds its GPT (embeddings first) and never re-initializes it:
    # the same seed gives the same weights as PyTorch's own constructors, in the same order.
    model = _model("study")
    torch.manual_seed(0)
    tok, pos = nn.Embedding(97, 32), nn.Embedding(16, 32)
    query = nn.Linear(32, 32, bias=False)
    assert torch.equal(model.tok_emb.weight, tok.weight) and torch.equal(model.pos_emb.weight, pos.weight)
    assert torch.equal(model.trf_blocks[0].att.W_query.weight, query.weight)
    bias = model.trf_blocks[0].ff.layers[0].bias
    assert bias.abs().max() > 0 and bias.abs().max() <= 1 / math.sqrt(32)  # uniform, not zeros


@pytest.mark.parametrize("init", ["gpt2", "nanogpt"])
def test_gpt2_and_nanogpt_inits(init: str) -> None:
    model = _model(init)
    residual = 0.02 / math.sqrt(2 * SMALL["n_layers"]) if init == "nanogpt" else 0.02
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert not p.any(), name  # zero biases
        elif "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name  # norm scales keep their ones
        elif p.numel() > 500:
            std = residual if name.endswith(RESIDUAL_PROJECTIONS) else 0.02
            assert p.std().item() == pytest.approx(std, rel=0.15), name


def test_a_bad_init_is_refused_naming_the_field_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^model\.init: 'xavier' is not one of study, gpt2, nanogpt$"):
        GPTConfig(init="xavier")
    assert [str(i) for i in ModelInit] == ["study", "gpt2", "nanogpt"]


# --- old runs: recorded before model.init existed --------------------------------------------------

CODE = CodeState("newcode000000000", {}, {})


@pytest.fixture
def old_store(tmp_path: Path, store_template: Path) -> tuple[Store, str]:
    shutil.copyfile(store_template, tmp_path / "mlflow.db")
    store = Store.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return store, store.experiment_id("old_sweep", str(tmp_path / "mlartifacts"))


def _old_run(store: Store, exp: str, fp: str, params: dict[str, str] | None = None) -> str:
    """A finished run as the code before model.init recorded it: no such param, other code."""
    run_id = store.create_run(exp, "torch_layernorm-s0", {FINGERPRINT_TAG: fp, "outcome": "finished", "norm": "torch_layernorm",
                                                          CODE_FINGERPRINT_TAG: "oldcode000000000"})  # fmt: skip
    store.log_params(run_id, {"optim.lr": "0.001", **(params or {})})
    store.log_metrics(run_id, dict.fromkeys(REQUIRED_FINAL_METRICS, 1.0))
    store.terminate(run_id, "FINISHED")
    return run_id


def test_a_rerun_says_which_init_the_old_runs_had(old_store: tuple[Store, str]) -> None:
    store, exp = old_store
    study, gpt2 = Identity.of(compose(["experiment_name=old_sweep"])), Identity.of(compose(["experiment_name=old_sweep", "model.init=gpt2"]))
    # Runs recorded before the key had GPT-2's init: the gpt2 config keeps their fingerprint.
    assert study.before_init == gpt2.fingerprint == "8f44d02402f48d1f" and gpt2.before_init is None
    assert study.fingerprint != gpt2.fingerprint and study.params["model.init"] == "study"
    old = _old_run(store, exp, gpt2.fingerprint)

    # The default (study) config: a new run, and one line that says why and what would reuse them.
    d = decide_job(store, exp, study.fingerprint, "resume", 300.0, lambda run: False, CODE, "fail", study.before_init)
    assert (d.action, d.run.info.run_id, d.supersede) == ("new", old, [])
    assert d.reason == (
        "of this config was recorded before model.init existed, with model.init=gpt2 (GPT-2's N(0, 0.02)); this job's "
        "model.init differs, so it trains a new run beside them; model.init=gpt2 finds them again, and "
        "sweep.on_code_change (fail | rerun | keep) then says whether they are reused"
    )
    # model.init=gpt2: the same config as the old runs, made by other code: sweep.on_code_change decides.
    with pytest.raises(ConfigError, match=r"1 recorded before model\.init existed: they started from model\.init=gpt2, as this config does"):
        decide_job(store, exp, gpt2.fingerprint, "resume", 300.0, lambda run: False, CODE, "fail")
    kept = decide_job(store, exp, gpt2.fingerprint, "resume", 300.0, lambda run: False, CODE, "keep")
    assert (kept.action, kept.run.info.run_id) == ("skip", old)


def test_runs_that_recorded_their_init_get_no_such_line(old_store: tuple[Store, str]) -> None:
    store, exp = old_store
    study = Identity.of(compose(["experiment_name=old_sweep"]))
    _old_run(store, exp, study.before_init or "", {"model.init": "gpt2"})  # a gpt2 run of this code: another config, said by its params
    d = decide_job(store, exp, study.fingerprint, "resume", 300.0, lambda run: False, CODE, "fail", study.before_init)
    assert (d.action, d.run, d.reason) == ("new", None, "")


def test_the_study_sections_code_line_names_what_a_sweep_changed() -> None:
    study = study_code()
    assert study == {"model.init": "study", "model.attention": "explicit", "optim.decay_norm_and_bias": "True",
                     "optim.betas": "[0.9, 0.999]", "optim.min_lr_ratio": "0.1", "optim.grad_clip": "3.5",
                     "data.order": "in_order", "test_weights": "best_train_loss"}  # fmt: skip
    runs = pd.DataFrame({"model.init": ["", "study"], "model.attention": ["sdpa"] * 2, "optim.decay_norm_and_bias": ["False"] * 2,
                         "optim.betas": ["[0.9, 0.95]"] * 2, "optim.min_lr_ratio": ["", "0.1"], "optim.grad_clip": ["1.0"] * 2,
                         "data.order": ["drawn"] * 2, "test_weights": ["final"] * 2})  # fmt: skip
    assert code_line(runs, study) == (
        "code: this sweep model.init=gpt2 (recorded before model.init) / study, model.attention=sdpa, "
        "optim.decay_norm_and_bias=False, optim.betas=[0.9, 0.95], optim.min_lr_ratio=0.1, optim.grad_clip=1.0, "
        "data.order=drawn, test_weights=final; the study model.init=study, model.attention=explicit, "
        "optim.decay_norm_and_bias=True, optim.betas=[0.9, 0.999], optim.min_lr_ratio=0.1, optim.grad_clip=3.5, "
        "data.order=in_order, test_weights=best_train_loss (differs: model.init, model.attention, "
        "optim.decay_norm_and_bias, optim.betas, optim.grad_clip, data.order, test_weights)"
    )
    same = {"optim.decay_norm_and_bias": "True", "optim.betas": "[0.9, 0.999]", "model.attention": "explicit",
            "optim.grad_clip": "3.5", "data.order": "in_order", "test_weights": "best_train_loss"}  # fmt: skip
    assert code_line(runs.iloc[1:].assign(**same), study).endswith("test_weights=best_train_loss")


def test_the_fingerprint_is_the_inits() -> None:
    prints = {init: fingerprint(compose([f"model.init={init}"])) for init in ModelInit}
    assert len(set(prints.values())) == 3


@pytest.mark.slow  # a real multirun of two tiny jobs
def test_a_sweep_of_inits_trains_two_variants_that_start_apart(tmp_path: Path, token_cache_dir: Path) -> None:
    run_sweep(tmp_path, token_cache_dir, "init_sweep", "model.init=study,gpt2")
    runs = training_runs(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"), "init_sweep")
    assert sorted(r.data.params["model.init"] for r in runs) == ["gpt2", "study"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.tags["variant"] for r in runs}) == 2
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = {r.data.params["model.init"]: client.get_metric_history(r.info.run_id, "train/train_loss")[0] for r in runs}
    assert first["study"].step == first["gpt2"].step == 1
    # GPT-2's init starts at the uniform ln(50257) = 10.82; N(0, 1) embeddings and a Kaiming-uniform head do not.
    assert first["gpt2"].value == pytest.approx(math.log(50257), abs=0.1)
    assert abs(first["study"].value - first["gpt2"].value) > 0.1  # 11.04 against 10.82 at this width (32)
    report = (tmp_path / "reports" / "init_sweep" / "report.md").read_text()
    code = [line for line in report.splitlines() if "code: this sweep model.init=" in line]
    assert code, report[:3000]
    swept = code[0].split("code: this sweep model.init=")[1].split(",")[0]
    assert set(swept.split(" / ")) == {"study", "gpt2"} and "(differs: model.init," in code[0], code[0]


def test_runs_recorded_before_model_init_have_one_label_in_the_report(
    old_store: tuple[Store, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Old runs beside runs of the study's init: the report's variants and headline read `init=none`
    and `at init=None` where its study section said `model.init=gpt2 (recorded before model.init)`."""
    from src.report.__main__ import main as report_main
    from src.tracking.identity import INIT_RECORDED_BEFORE

    store, exp = old_store
    for seed, params in ((0, {}), (1, {}), (0, {"model.init": "study"}), (1, {"model.init": "study"})):
        run_id = _old_run(store, exp, f"fp{seed}{len(params)}", {"seed": str(seed), **params})
        store.set_tags(run_id, {"seed": str(seed)})
        store.log_metrics(run_id, {"test_loss": 6.0 + seed / 10 + len(params) / 100})
    code = report_main(["--tracking-uri", store.uri, "--experiment-name", "old_sweep", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    said = " ".join(out.split())  # the terminal wraps long lines
    assert "None" not in said and "init=none" not in said, said
    assert f"init={INIT_RECORDED_BEFORE}" in said  # the variants and the headline
    assert f"model.init={INIT_RECORDED_BEFORE} / study" in said  # the study section, as before
