"""`python -m src.preflight`: sweep expansion, the memory model, every check, and the dress rehearsal."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY_MODEL, run_cli

from src.core.paths import CONF_DIR, compose, preset_norms
from src.data import build_source
from src.preflight.__main__ import main
from src.preflight.jobs import expand_jobs
from src.preflight.memory import estimate_memory, parameter_bytes
from src.training.run_spec import validate

STUDY_NORMS = preset_norms("norm_sweep")


@pytest.fixture
def prepared(token_cache_dir: Path, tiny_overrides: list[str]) -> list[str]:
    """The tiny run's overrides with its Shakespeare token cache prepared."""
    build_source(compose(tiny_overrides).data).prepare(token_cache_dir)
    return tiny_overrides


def _fail_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("FAIL ")]


def test_sweep_expands_like_hydras_basic_sweeper() -> None:
    # The experiment's own sweep list comes first, then the command line's, later keys varying fastest.
    study = expand_jobs(["experiment=gpt2_small_study", "cluster=gpu_node"], multirun=True).jobs
    assert [job[0] for job in study] == [f"norm={n}" for n in STUDY_NORMS]
    assert all(job[1:] == ["experiment=gpt2_small_study", "cluster=gpu_node"] for job in study)
    jobs = expand_jobs(["norm=glob(torch_*)", "seed=0,1"], multirun=True).jobs
    torch_norms = sorted(p.stem for p in (CONF_DIR / "norm").glob("torch_*.yaml"))
    assert jobs == [[f"norm={n}", f"seed={s}"] for n in torch_norms for s in (0, 1)]
    assert expand_jobs(["seed=0,1"], multirun=False).jobs == [["seed=0,1"]]


def test_a_sequential_sweeper_is_expanded_to_its_first_round() -> None:
    # A sweeper that chooses the seeds itself (hydra/sweeper=sequential: first_seeds up to max_seeds).
    sequential = ["hydra.sweeper._target_=some.SequentialSweeper", "+hydra.sweeper.first_seeds=2", "+hydra.sweeper.max_seeds=6"]
    sweep = expand_jobs(["norm=hand_rmsnorm,torch_rmsnorm", *sequential], multirun=True)
    assert sweep.rounds is not None and (sweep.rounds.first_seeds, sweep.rounds.max_seeds) == (2, 6)
    assert [(j[0], j[-1]) for j in sweep.jobs] == [
        (f"norm={n}", f"seed={s}") for n in ("hand_rmsnorm", "torch_rmsnorm") for s in (0, 1)
    ]


def test_memory_model_counts_states_exactly_and_activations_by_batch() -> None:
    cfg = validate(compose(TINY_MODEL))
    one, four = (estimate_memory(cfg, b, 32, "32-true") for b in (1, 4))
    n_bytes = parameter_bytes(cfg, "32-true")
    assert one.params == n_bytes and one.optimizer == 2 * n_bytes  # fp32 weights, AdamW's two moments
    assert 3.5 < (four.activations + four.temporaries) / (one.activations + one.temporaries) <= 4.0
    mixed = estimate_memory(cfg, 4, 32, "bf16-mixed")
    # fp32 master weights; autocast is replayed (bf16 copies of weights and activations, fp32 logits for the loss)
    assert mixed.params == n_bytes and mixed.activations != four.activations
    ddp = estimate_memory(cfg, 4, 32, "32-true", ddp=True)
    assert ddp.total - four.total == n_bytes  # DDP's gradient buckets


def test_tiny_run_passes_with_a_table(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*prepared, "checkpoint.enabled=true"]) == 0
    out = capsys.readouterr().out
    assert "torch_layernorm-s0" in out and "3,230,144" in out  # the tiny model's parameters
    assert "1,391,189 train tokens" in out and "sqlite, writable" in out and "free" in out
    assert not _fail_lines(out)


def test_micro_batch_that_cannot_fit_names_the_field(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # cluster=gpu: weighed against the card preflight names, with no GPU needed here.
    assert main([*prepared, "cluster=gpu", "preflight.gpu_memory_gb=0.05"]) == 1
    (line,) = _fail_lines(capsys.readouterr().out)
    assert "optim.micro_batch_size=4: needs" in line and "preflight.gpu_memory_gb" in line and "fits" in line


def test_cpu_processes_share_the_machines_memory(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # One tiny fp32 job needs ~0.12 GiB: it fits 0.2 GiB alone, but not as two DDP ranks on one CPU.
    assert main([*prepared, "preflight.gpu_memory_gb=0.2"]) == 0
    assert main([*prepared, "preflight.gpu_memory_gb=0.2", "cluster.devices=2", "cluster.strategy=ddp"]) == 1
    (line,) = _fail_lines(capsys.readouterr().out)
    assert "per device for 2 processes" in line


def test_budget_beyond_the_data_names_the_field(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*prepared, "optim.max_steps=20000"]) == 1  # 20,000 x 4 x 32 = 2,560,000 > 1,391,189 tokens
    (line,) = _fail_lines(capsys.readouterr().out)
    assert "optim.max_steps: the run trains 2,560,000 tokens" in line and "1,391,189" in line


def test_checkpoints_beyond_the_free_disk_name_the_field(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # A vocabulary of 10^12 tokens: ~190 TB of checkpoint, built on fake tensors only.
    huge = ["model.vocab_size=1000000000000", "checkpoint.enabled=true", "preflight.gpu_memory_gb=1e15"]
    assert main([*prepared, *huge]) == 1
    lines = _fail_lines(capsys.readouterr().out)
    assert any("paths.checkpoints_dir: the checkpoints need" in line and "free" in line for line in lines), lines


@pytest.mark.parametrize(
    "override,start",
    [
        ("preflight.gpu=nosuchcard", "config error: preflight.gpu: 'nosuchcard' is not a known card; valid choices: a100-40gb"),
        ("preflight.mfu=2", "config error: preflight.mfu: must be in (0, 1], got 2"),
        ("preflight.memory_headroom=0", "config error: preflight.memory_headroom: must be in (0, 1], got 0"),
        # was: a FAIL row (status 1) / accepted while no rehearsal ran
        ("preflight.steps=-1", "config error: preflight.steps: must be an integer >= 0 (0: no rehearsal), got -1"),
        ("preflight.rehearsal_micro_batch=0", "config error: preflight.rehearsal_micro_batch: must be an integer >= 1"),
    ],
)
def test_a_bad_preflight_setting_is_a_config_error(
    prepared: list[str], override: str, start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The preflight's own settings are its command line, not the job's: status 2 in one line, no
    table (was: status 1 and a FAIL row, as if the job would fail)."""
    assert main([*prepared, "cluster=gpu", override]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = [x for x in captured.err.splitlines() if not x.startswith("[preflight]")]
    assert line.startswith(start), line


def test_an_unknown_option_is_a_config_error(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Refused while composing, as python -m src.train refuses it: one line, status 2, no table."""
    assert main([*prepared, "cluster=gpu", "norm=batchnorm"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().startswith("config error: norm: no option 'batchnorm' (conf/norm/); valid choices:")
    assert captured.out == ""


@pytest.mark.slow  # a dress rehearsal: real optimizer steps of a job
def test_dress_rehearsal_measures_the_estimate(prepared: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*prepared, "preflight.steps=2"]) == 0
    out = capsys.readouterr().out
    row = out.split("dress rehearsal (preflight.steps):")[1].splitlines()[2].split()
    assert row[:4] == ["torch_layernorm-s0", "cpu", "32-true", "4"]
    assert 0.5 < float(row[-1]) < 2.0  # estimate / measured peak


@pytest.mark.slow
def test_study_sweep_on_gpu_nodes_with_a_cpu_rehearsal(tmp_path: Path) -> None:
    """The command for the five study norms; then one real step at full size here of the norm whose
    estimate is the largest (hand_layernorm, the most activations: the one a wrong estimate would let
    run out of memory). A full-size step and its set-up take about a minute on this CPU, so the others
    are left to the estimate alone (a small model's dress rehearsal above checks it at small scale)."""
    where = [f"paths.mlflow_db={tmp_path / 'mlflow.db'}", f"paths.checkpoints_dir={tmp_path / 'ckpt'}",
             f"paths.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    proc = run_cli("src.preflight", "-m", "experiment=gpt2_small_study", "cluster=gpu_node", *where, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout
    rows = {line.split()[0]: line for line in table.splitlines() if line.split()[:1] and "-s0" in line.split()[0]}
    assert list(rows) == [f"{n}-s0" for n in STUDY_NORMS]
    assert "163,009,536" in rows["torch_layernorm-s0"] and "162,990,336" in rows["torch_rmsnorm-s0"]
    assert all("33,165" in r and "12 x 1 x 8 = 96" in r and "of 80.0" in r for r in rows.values())
    assert "device-hours" in table and "not prepared" in table

    rehearsed = ["hand_layernorm"]
    proc = run_cli(
        "src.preflight", "-m", "experiment=gpt2_small_study", "cluster=gpu_node", f"norm={','.join(rehearsed)}",
        "preflight.steps=1", "preflight.rehearsal_micro_batch=1", *where, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rehearsal = proc.stdout.split("dress rehearsal (preflight.steps):")[1]
    ratios = {line.split()[0]: float(line.split()[-1]) for line in rehearsal.splitlines() if "-s0" in line}
    assert list(ratios) == [f"{n}-s0" for n in rehearsed] and all(0.7 < r < 1.5 for r in ratios.values()), rehearsal


def test_time_and_cost_of_the_study_on_a100s() -> None:
    import torch

    from src.core.budget import resolve_budget
    from src.model.gpt import GPTModel, model_stats
    from src.preflight.cards import card_for
    from src.preflight.cost import estimate_time

    cfg = compose(["experiment=gpt2_small_study", "cluster=gpu_node"])
    with torch.device("meta"):
        stats = model_stats(GPTModel(validate(cfg)))
    budget = resolve_budget(cfg.optim, cfg.seq_len, 8, stats.n_params)
    card = card_for(cfg, on_gpu=True)
    t = estimate_time(cfg, budget, stats.flops_per_token, card)
    # 132 validations of 960 windows and 19,200 test windows of 1024 tokens, forward only (1/3 of the FLOPs).
    evaluated = (33_165 // 250 * 960 + 19_200) * 1024
    flops = stats.flops_per_token * (3_260_252_160 + evaluated / 3)
    assert t.seconds == pytest.approx(flops / (8 * 312e12 * 0.15))
    assert 2.5 < t.seconds / 3600 < 3.0 and t.device_hours == pytest.approx(8 * t.seconds / 3600)  # the study: 2.3-2.6 h
    # fp32 runs: the A100's dense TF32 (156) and true fp32 (19.5) peaks, from the one table the bench reads too
    fp32 = compose(["experiment=gpt2_small_study", "cluster=gpu_node", "precision=fp32", "precision.matmul_precision=highest"])
    assert estimate_time(fp32, budget, stats.flops_per_token, card).seconds == pytest.approx(312 / 19.5 * t.seconds)
    tf32 = compose(["experiment=gpt2_small_study", "cluster=gpu_node", "precision=fp32", "precision.matmul_precision=high"])
    assert estimate_time(tf32, budget, stats.flops_per_token, card).seconds == pytest.approx(2 * t.seconds)


def test_every_card_has_the_benchmark_peaks() -> None:
    """preflight's cards take their peaks from src.core.devices.PEAK_TFLOPS, by name: none is left without."""
    from src.core.devices import PEAK_TFLOPS
    from src.preflight.cards import CARDS, card_for

    for key in CARDS:
        card = card_for(compose([f"preflight.gpu={key}"]), on_gpu=True)
        peaks = {kind: card.peak_tflops(kind) for kind in ("bf16", "tf32", "fp32")}
        assert peaks in PEAK_TFLOPS.values(), (key, peaks)
    l40s = card_for(compose(["preflight.gpu=l40s"]), on_gpu=True)
    assert (l40s.peak_tflops("bf16"), l40s.peak_tflops("tf32")) == (362.05, 183.0)  # NVIDIA's L40S datasheet, dense
    assert card_for(compose([]), on_gpu=False).peak_tflops("bf16") is None  # a CPU


def test_a_sweeps_jobs_are_the_basic_sweepers_product_through_hydras_public_overrides() -> None:
    """src/core/overrides.py expands a sweep as Hydra's basic sweeper does: one list per key in the
    order keys first appear, a later line of a key in the earlier's place, ranges enumerated; an
    interval, which only an optimizing sweeper samples, is refused."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from src.core.overrides import job_overrides

    parsed = OverridesParser.create().parse_overrides(["norm=a,b", "seed=range(0,2)", "+x=1", "norm=c,d"])
    assert job_overrides(parsed) == [
        [f"norm={norm}", f"seed={seed}", "+x=1"] for norm in ("c", "d") for seed in (0, 1)
    ]
    with pytest.raises(HydraException, match=r"optim\.lr=interval\(0,1\): a basic sweep takes lists"):
        job_overrides(OverridesParser.create().parse_overrides(["optim.lr=interval(0,1)"]))


def test_a_checkpoint_that_keeps_the_scored_weights_is_counted_with_them(tiny_overrides: list[str]) -> None:
    from src.preflight.job import CheckpointLedger, inspect_job

    one = {}
    for weights in ("final", "best_train_loss"):  # best_train_loss: a second copy of the weights in last.ckpt
        ledger = CheckpointLedger()
        inspect_job([*tiny_overrides, "checkpoint.enabled=true", f"test_weights={weights}"], ledger)
        one[weights] = sum(ledger.kept.values())
    assert one["final"] > 0 and one["best_train_loss"] * 3 == one["final"] * 4
