"""A norm of the user's, named by `_target_` in a config folder of their own, outside the repository:
swept beside a built-in through the real entry point, checked before anything is recorded, its code
part of its result (src/model/user_norms.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from src.stats.verdicts import ClaimWord, SpeedWord
from src.tracking.sweep import SWEEP_TAG
from src.tracking.tags import SWEEP_COMMAND_TAG
from src.tracking.ui_view import START_VIEW_TAG, USER_NORM_TAGS, column
from tests.helpers import FAST, REPO, cli_env, run_train

# A norm the way a user writes one: their own file, their own class, an option of its own.
USER_NORM = '''
import torch
from torch import nn


class CenteredRMSNorm(nn.Module):
    """RMSNorm of the mean-centred vector with a learnable scale."""

    def __init__(self, dim: int, eps: float = 1e-6, scale_init: float = 1.0) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.full((dim,), scale_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x - x.mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
'''


# The user's own hypotheses about their norm, stated before the sweep (docs/claims.md): judged in a
# section of their own, beside the study's, with the same rule, figure and MLflow tags.
MY_CLAIMS = """
source: {title: my norm's hypotheses}
claims:
  - statement: my norm's test loss is within 0.5 nats of nn.RMSNorm's
    metric: test_loss
    parts: [{a: torch_rmsnorm, b: my_norm, asserts: equivalence, size: [-0.5, 0.5]}]
  - statement: my norm's share of a step falls from cpu_small to gpt2_small
    metric: norm_share
    parts: [{b: my_norm, asserts: trend, sizes: [cpu_small, gpt2_small]}]
"""


def user_folder(root: Path, module: str, source: str, yaml_name: str = "my_norm", target: str = "CenteredRMSNorm") -> Path:
    """`root/<module>.py` and `root/my_conf/norm/<yaml_name>.yaml` naming it; the config folder."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    conf = root / "my_conf" / "norm"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / f"{yaml_name}.yaml").write_text(f"_target_: {module}.{target}\nfamily: rmsnorm\n")
    return root / "my_conf"


def sweep(root: Path, conf: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The user's command, from the repository, their module's folder on PYTHONPATH."""
    env = {**cli_env(), "PYTHONPATH": str(root)}
    args = [
        "-m", "--config-dir", str(conf), "norm=torch_rmsnorm,my_norm", "seed=0,1", *FAST, "experiment_name=mine",
        f"paths.cache_dir={root / 'cache'}", f"paths.mlflow_db={root / 'mlflow.db'}",
        f"paths.mlflow_artifacts={root / 'art'}", f"paths.reports_dir={root / 'reports'}",
        f"paths.checkpoints_dir={root / 'ck'}", f"hydra.sweep.dir={root / 'multirun'}", *extra,
    ]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "src.train", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_user_norm_swept_judged_and_tied_to_its_code(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    conf = user_folder(tmp_path, "my_norms", USER_NORM)
    (conf / "claims").mkdir()
    (conf / "claims" / "my_claims.yaml").write_text(MY_CLAIMS)
    done = sweep(tmp_path, conf, "report.speed_rounds=2", "report.speed_kernel_s=1", "report.claims=[rmsnorm_study,my_claims]",
                 "report.share_rounds=2")  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # Its own claims, judged in their own section and headline line, with their figure and files.
    assert "Against my norm's hypotheses — The claims of my norm's hypotheses, stated in my_claims.yaml" in out, out[-3000:]
    assert "Claims of my_claims.yaml? 2 of its 2 claims tested in this sweep's domain" in out, out[-3000:]
    assert "2. " in out and "the share at cpu_small " in out  # the trend, timed for the user's norm too
    # The study's eighth claim speaks of RMSNorm's saving against LayerNorm: without a LayerNorm swept it is
    # not tested here, and says what it needs (its words before read it as nn.RMSNorm's share alone).
    eighth = out[out.index("\n8. "):].split("\n9. ")[0]
    assert eighth.startswith("\n8. not tested here") and "needs hand_layernorm, torch_layernorm" in " ".join(eighth.split()), eighth[:900]
    assert (tmp_path / "reports" / "mine" / "claims-my_claims.png").is_file() and (tmp_path / "reports" / "mine" / "claims-my_claims.csv").is_file()
    assert out.count(" ok | ") == 4, out[-3000:]  # every run finished
    assert "my_norm vs torch_rmsnorm (paired over 2 seeds): test loss" in out  # compared
    speed = [line for line in out.splitlines() if line.startswith("my_norm vs torch_rmsnorm: ")]
    assert speed and speed[0].split(": ", 1)[1].split(" ")[0] in {w.value for w in SpeedWord}, out[-3000:]  # its speed verdict
    assert "my_norm fwd=" in out  # its dispatched kernels recorded

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("mine")
    mine = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("norm") == "my_norm"]
    digest = hashlib.sha256((tmp_path / "my_norms.py").read_bytes()).hexdigest()
    assert len(mine) == 2
    for run in mine:
        assert run.data.tags["normsweep.norm.target"] == "my_norms.CenteredRMSNorm"
        assert run.data.tags["normsweep.norm.file_sha256"] == digest
        assert run.data.tags["normsweep.norm.params"] == "32"  # one norm at the model's width
        assert run.data.params["norm._target_"] == "my_norms.CenteredRMSNorm"
    # The MLflow views show the user's class and file hash as columns (they stay off for built-ins alone).
    columns = json.loads(exp.tags[START_VIEW_TAG])["selectedColumns"]
    assert {column("tags", t) for t in USER_NORM_TAGS} <= set(columns), columns
    # The verdict in MLflow: each claim's word a tag on the sweep's run, the user's file under its own name.
    verdicts = [r.data.tags for r in client.search_runs([exp.experiment_id]) if "normsweep.claims.my_claims.claim1" in r.data.tags]
    assert verdicts and verdicts[0]["normsweep.claims.my_claims.claim2"] in {w.value for w in ClaimWord}, verdicts

    # The sweep's recorded command, as MLflow shows it, re-runs as recorded (its --config-dir and PYTHONPATH
    # kept): every job already done, nothing trains again.
    (parent,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(SWEEP_TAG) == "true"]
    recorded = parent.data.tags[SWEEP_COMMAND_TAG]
    assert recorded.startswith(f"PYTHONPATH={tmp_path} python -m src.train -m --config-dir {conf} "), recorded
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}  # the command brings its own
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python`: this venv's, as activated
    again = subprocess.run(["bash", "-c", recorded], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    said = again.stdout + again.stderr
    assert again.returncode == 0 and said.count(": skipped, run ") == 4, said[-3000:]

    with (tmp_path / "my_norms.py").open("a") as f:
        f.write("# an edit that could change the numbers\n")
    stopped = sweep(tmp_path, conf)
    assert stopped.returncode == 2, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("config error: sweep.on_code_change=fail: 2 ") and "my_norms.py" in line, line

    rerun = sweep(tmp_path, conf, "sweep.on_code_change=rerun")
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert rerun.stdout.count("my_norm-s") >= 2 and rerun.stdout.count(" ok | ") == 2  # only the edited norm's runs train again


# Each refusal: (what the file holds, the YAML's target, a phrase of its line). The module name is
# the case's own, so that an import from an earlier case cannot answer for it.
BROKEN = {
    "missing": ("", "nowhere_norms.Nope", "cannot import module nowhere_norms (No module named 'nowhere_norms'); put the folder"),
    "missing_name": ("import torch\n", "Nope", "has no Nope; its classes: none"),
    "not_a_module": ("def Norm(dim, eps=1e-5):\n    return dim * 2\n", "Norm", "not an nn.Module"),
    "shape": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "    def forward(self, x):\n        return x.mean(-1)\n",
        "Norm",
        "a norm of the model returns a tensor of its input's shape and dtype",
    ),
    "dtype": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "    def forward(self, x):\n        return x.double()\n",
        "Norm",
        "a norm of the model returns a tensor of its input's shape and dtype",
    ),
    "non_finite": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self, dim, eps=1e-5):\n        super().__init__()\n"
        "    def forward(self, x):\n        return x / 0.0\n",
        "Norm",
        "non-finite values",
    ),
    "no_gradient": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self, dim, eps=1e-5):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.ones(dim))\n"
        "    def forward(self, x):\n        return x.detach() * self.w\n",
        "Norm",
        "no gradient reaches its input",
    ),
    # What the signature says before anything is built (before: "fails to build on the meta device").
    "no_width": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "    def forward(self, x):\n        return x\n",
        "Norm",
        "takes no argument for the model's width (Norm.__init__(self))",
    ),
    "not_a_norm": ("", "os.getcwd", "os.getcwd takes no arguments, so it is not a norm class"),
    "not_a_module_class": ("class Norm:\n    def __init__(self, dim):\n        pass\n", "Norm", "is a class but not an nn.Module"),
    "meta": (
        "import torch\nclass Norm(torch.nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.ones(dim))\n        assert self.w.sum().item() == dim\n"
        "    def forward(self, x):\n        return x * self.w\n",
        "Norm",
        "fails to build on the meta device",
    ),
}


@pytest.mark.fresh_store
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_user_norm_refused_before_anything_is_recorded(
    case: str, tmp_path: Path, tiny_overrides: list[str], store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target, phrase = BROKEN[case]
    module = f"user_norm_{case}"
    conf = user_folder(tmp_path, module, source, target=target if "." not in target else target.split(".")[1])
    if "." in target:  # not importable: the YAML names a module that does not exist
        (conf / "norm" / "my_norm.yaml").write_text(f"_target_: {target}\nfamily: rmsnorm\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = run_train("-m", "--config-dir", str(conf), "norm=torch_rmsnorm,my_norm", *tiny_overrides)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("config error: norm=my_norm ("), lines
    assert str(conf / "norm" / "my_norm.yaml") in lines[0] and phrase in lines[0], lines[0]
    assert not Path(store["db"]).exists()  # no store, no run


@pytest.mark.fresh_store
def test_a_built_in_name_is_refused(tmp_path: Path, tiny_overrides: list[str], store: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    conf = user_folder(tmp_path, "user_norm_clash", USER_NORM, yaml_name="hand_rmsnorm")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = run_train("-m", "--config-dir", str(conf), "norm=torch_rmsnorm,hand_rmsnorm", *tiny_overrides)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("config error: norm=hand_rmsnorm (") and "is a built-in variant's name" in line and "rename its YAML" in line
    assert not Path(store["db"]).exists()


def test_check_runs_once_per_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from src.model import user_norms
    from src.model.norms import NormSpec

    user_folder(tmp_path, "user_norm_once", USER_NORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(user_norms.CHECKED_ENV, raising=False)
    calls = []
    real = user_norms._check_runs
    monkeypatch.setattr(user_norms, "_check_runs", lambda *a: calls.append(a) or real(*a))
    options = {"_target_": "user_norm_once.CenteredRMSNorm", "scale_init": 1.0}
    widths = [("attn", 16), ("ffn", 16), ("final", 16)]
    for _ in range(3):  # three jobs of one variant
        NormSpec("my_norm", 1e-5, options).check_at(widths, "bf16-mixed")
    assert len(calls) == 1  # one width and options for all three positions, checked once
    assert os.environ[user_norms.CHECKED_ENV]  # ...and by the processes this one starts
    with (tmp_path / "user_norm_once.py").open("a") as f:
        f.write("# an edit: another file hash, another fingerprint, checked again\n")
    NormSpec("my_norm", 1e-5, options).check_at(widths, "bf16-mixed")
    assert len(calls) == 2
    NormSpec("hand_rmsnorm").check_at(widths, "bf16-mixed")  # a shipped norm: its tests check it, not each run
    assert len(calls) == 2


def test_an_import_failure_names_what_is_missing_and_a_nested_target_resolves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of the user's that imports a package that is not there names that package (not
    PYTHONPATH, which holds the module); `module.Class.factory` resolves as Hydra's `_target_` does."""
    from src.model.norms import NormSpec

    (tmp_path / "user_norm_needs_dep.py").write_text("import no_such_dependency_xyz\n")
    nested = "import torch\nclass Norms:\n    @staticmethod\n    def rms(dim, eps=1e-6):\n        return torch.nn.RMSNorm(dim, eps=eps)\n"
    (tmp_path / "user_norm_nested.py").write_text(nested)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as err:
        NormSpec("mine", 1e-5, {"_target_": "user_norm_needs_dep.Norm"})
    assert "importing user_norm_needs_dep failed: it imports no_such_dependency_xyz, which cannot be found" in str(err.value)
    assert "PYTHONPATH=" not in str(err.value)
    spec = NormSpec("mine", 1e-5, {"_target_": "user_norm_nested.Norms.rms"})
    assert spec.takes_eps and spec.build(8).eps == 1e-5
    with pytest.raises(ValueError, match=r"norm\._target_: user_norm_nested\.Norms\.nope cannot be found"):
        NormSpec("mine", 1e-5, {"_target_": "user_norm_nested.Norms.nope"})


def test_signature_keys_and_an_installed_package() -> None:
    """`eps_arg: null` and `width_arg` for a signature that differs; an installed package's norm is
    recorded by its distribution and version, and one without eps says so."""
    from src.model.norms import NormSpec

    spec = NormSpec("gn", 1e-5, {"_target_": "torch.nn.GroupNorm", "width_arg": "num_channels", "num_groups": 1})
    assert spec.maker.eps_arg == "eps" and spec.build(8).num_channels == 8
    with pytest.raises(ValueError, match=r"norm\.eps_arg: torch.nn.LayerNorm has no argument 'epsilon'"):
        NormSpec("ln", 1e-5, {"_target_": "torch.nn.LayerNorm", "eps_arg": "epsilon"})
    with pytest.raises(ValueError, match=r"norm\.scale: not an argument of torch.nn.RMSNorm"):
        NormSpec("rms", 1e-5, {"_target_": "torch.nn.RMSNorm", "scale": 2})
    with pytest.raises(ValueError, match=r"norm\.reference: 'nope' is not a built-in variant"):
        NormSpec("rms", 1e-5, {"_target_": "torch.nn.RMSNorm", "reference": "nope"})
    assert NormSpec("rms", 1e-5, {"_target_": "torch.nn.RMSNorm"}).source.package.startswith("torch==")
    # An installed package's norm (a dev dependency, so the tutorial's second half is exercised here too).
    x = NormSpec("x_rms", 1e-5, {"_target_": "x_transformers.x_transformers.RMSNorm"})
    assert not x.takes_eps and x.source.package.startswith("x-transformers==")


def test_a_user_norm_is_paired_with_its_reference() -> None:
    """Its YAML's reference when swept, else its family's first built-in, else torch_layernorm, else
    the first built-in; the built-ins' own pairs as before."""
    from src.report.judge.pairs import pairs_for

    present = {"torch_layernorm": "layernorm", "hand_rmsnorm": "rmsnorm", "torch_rmsnorm": "rmsnorm", "mine": "rmsnorm", "odd": "wavelet"}
    pairs = pairs_for(present, references={"odd": "torch_rmsnorm"})
    assert ("hand_rmsnorm", "mine") in pairs and ("torch_rmsnorm", "odd") in pairs
    assert ("hand_rmsnorm", "torch_rmsnorm") in pairs and ("torch_layernorm", "torch_rmsnorm") in pairs
    assert ("torch_layernorm", "odd") in pairs_for(present)  # no reference named: torch_layernorm
    assert pairs_for({"torch_rmsnorm": "", "mine": ""}) == [("torch_rmsnorm", "mine")]  # the speed check knows no families


def _recorded_reference(options: dict[str, object]) -> str:
    """The reference tag a job of this user norm records (src.training.run_spec.user_norm_record), "" when none."""
    from src.model.gpt import GPTConfig
    from src.tracking.code import CodeState
    from src.tracking.record import RecordSpec
    from src.tracking.tags import NORM_REFERENCE_TAG
    from src.training.run_spec import user_norm_record

    model = GPTConfig(vocab_size=64, context_length=8, emb_dim=16, n_heads=2, n_layers=1, norm_type="mine", norm_options=options)
    record = RecordSpec("e", "mine-s0", None, {}, {}, "", "", 1, code=CodeState("f", {}, {}))
    return user_norm_record(model, record).tags.get(NORM_REFERENCE_TAG, "")


def test_a_reference_is_recorded_only_as_named_and_the_report_chooses_by_family() -> None:
    """Issue 62 item 6: a YAML without `reference:` once recorded torch_layernorm, so an rmsnorm of the
    user's was paired with torch_layernorm though torch_rmsnorm was swept. A named one is recorded as
    named; none named records nothing, and the pairs follow the family (docs/own_norm.md's rule)."""
    import pandas as pd

    from src.report.judge.pairs import comparison_pairs

    assert _recorded_reference({"_target_": "torch.nn.RMSNorm"}) == ""
    assert _recorded_reference({"_target_": "torch.nn.RMSNorm", "reference": "hand_layernorm"}) == "hand_layernorm"

    def runs(reference: str, norms: dict[str, str]) -> pd.DataFrame:
        rows = [{"variant": v, "family": f, "outcome": "finished", "seed": s, "test_loss": 3.0 + 0.01 * s, "start_time": s,
                 "norm_reference": reference if v == "mine" else ""} for v, f in norms.items() for s in range(3)]  # fmt: skip
        return pd.DataFrame(rows)

    both = {"hand_layernorm": "layernorm", "torch_layernorm": "layernorm", "torch_rmsnorm": "rmsnorm", "mine": "rmsnorm"}
    unnamed = _recorded_reference({"_target_": "torch.nn.RMSNorm"})
    assert ("torch_rmsnorm", "mine", "") in comparison_pairs(runs(unnamed, both))  # its family's, not torch_layernorm
    assert ("hand_layernorm", "mine", "") in comparison_pairs(runs("hand_layernorm", both))  # as named
    layernorms = {k: v for k, v in both.items() if k != "torch_rmsnorm"}  # none of its family swept
    assert ("torch_layernorm", "mine", "") in comparison_pairs(runs(unnamed, layernorms))
    assert ("torch_rmsnorm", "mine", "") in comparison_pairs(runs("torch_layernorm", {"torch_rmsnorm": "rmsnorm", "mine": "rmsnorm"}))


def test_the_study_section_lists_a_user_norm_as_not_the_studys() -> None:
    import pandas as pd

    from src.report.words.study_setting import not_the_study_lines

    runs = pd.DataFrame({"norm": ["torch_rmsnorm", "mine", "mine"], "norm_target": ["", "my_norms.Mine", "my_norms.Mine"]})
    assert not_the_study_lines(runs) == ["not the study's variants (no claim reads them): mine (my_norms.Mine)"]
    assert not_the_study_lines(runs[runs.norm == "torch_rmsnorm"]) == []


# Finite in training, NaN in eval mode: the fit runs, every validation and the test loss are NaN.
EVAL_NAN_NORM = """
import torch
from torch import nn


class EvalNaNNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.training else x * float("nan")
"""


@pytest.mark.slow
def test_a_nan_eval_loss_is_an_outcome_of_its_own_counted_everywhere(tmp_path: Path) -> None:
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from src.tracking.tags import EVAL_NOT_FINITE, OUTCOME_TAG

    conf = user_folder(tmp_path, "eval_nan_norms", EVAL_NAN_NORM, target="EvalNaNNorm")
    done = sweep(tmp_path, conf)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]  # a result, as a divergence is: the sweep goes on and ends
    job_lines = [line for line in out.splitlines() if line.startswith("[normsweep] my_norm-s")]
    assert len(job_lines) == 2 and all(" ok " not in line for line in job_lines), job_lines
    assert all("TEST LOSS NOT FINITE" in line and line.endswith("test loss nan") for line in job_lines), (
        job_lines
    )
    assert out.count(" ok | ") == 2  # torch_rmsnorm's two runs
    assert "my_norm: eval loss not finite (2/2 runs)" in out, out[-3000:]  # the headline names it

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("mine")
    mine = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("norm") == "my_norm"]
    assert len(mine) == 2
    assert all(r.data.tags[OUTCOME_TAG] == EVAL_NOT_FINITE and r.info.status == "FAILED" for r in mine)

    folder = tmp_path / "reports" / "mine"
    table = pd.read_csv(folder / "table.csv").set_index("variant")
    assert table.loc["my_norm", "finished"] == 0 and table.loc["my_norm", "notes"] == EVAL_NOT_FINITE, table
    assert table.loc["torch_rmsnorm", "finished"] == 2
    # The pairs say why there is none to compare, counted as the table counts it.
    assert f"No pairs to compare: my_norm has no finished run (2 runs, all {EVAL_NOT_FINITE})." in out, out[
        -3000:
    ]

    # Done, as a divergence is: the identical command skips every job.
    again = sweep(tmp_path, conf)
    assert (
        again.returncode == 0
        and "TEST LOSS NOT FINITE" not in again.stdout
        and again.stdout.count(" ok | ") == 0
    ), again.stdout[-2000:]
