"""Bad input is refused before anything is recorded, naming the field; names never escape their folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError, compose
from src.tracking.identity import Identity, checkpoint_folder
from src.tracking.record import RecordSpec
from src.tracking.store import Store
from src.tracking.store_uri import redact_text, redact_uri
from src.train import train
from src.training.run_spec import validate


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("seed=-1", "seed"),  # seed=abc and seed=1.5 fail while composing (tests/test_config.py)
        ("seed=4294967296", "seed"),
        (f"experiment_name={'x' * 300}", "experiment_name"),
        ("experiment_name=' '", "experiment_name"),
        ("model.vocab_size=1000", "model.vocab_size"),
        ("sweep.on_existing=skip", "sweep.on_existing"),
        ("sweep.on_code_change=ignore", "sweep.on_code_change"),
        ("sweep.stale_after_s=0", "sweep.stale_after_s"),
        ("sweep.heartbeat_s=-1", "sweep.heartbeat_s"),
        ("checkpoint.every_n_steps=0", "checkpoint.every_n_steps"),  # was: periodic checkpoints off, silently
        # Hydra's hint for a misspelt key (`optim.lrr=1`) is to append it: nothing read it, the run trained at the default lr
        ("+optim.lrr=1", "optim.lrr"),
        ("+data.folder=x", "data.folder"),
        ("+report.margin.tst_loss=0.1", "report.margin.tst_loss"),
    ],
)
@pytest.mark.fresh_store  # asserts that no store file is written
def test_refused_naming_the_field(override: str, field: str, tiny_overrides: list[str], store: dict[str, str]) -> None:
    cfg = compose([*tiny_overrides, override])
    with pytest.raises(ConfigError, match=f"^{field}: "):
        validate(cfg)
    with pytest.raises(ConfigError):
        train(cfg)
    assert not Path(store["db"]).exists()  # nothing recorded, not even a store


def test_a_job_waiting_out_its_servers_restart_is_not_taken_for_lost(tiny_overrides: list[str]) -> None:
    """A job waits up to SERVER_RESTART_S for a restarting server, writing no heartbeat: with a shorter
    staleness another copy of the sweep would take its job while it still runs. A file store has no
    server to wait for."""
    server = [*tiny_overrides, "logger.tracking_uri=http://127.0.0.1:9"]
    with pytest.raises(ConfigError, match=r"^sweep\.stale_after_s: must exceed 90 s with a tracking server: sweep\.heartbeat_s=30 plus the 60 s"):
        validate(compose([*server, "sweep.stale_after_s=90"]))
    validate(compose([*server, "sweep.stale_after_s=91"]))
    validate(compose([*server, "sweep.stale_after_s=50", "sweep.heartbeat_s=1", "logger.enabled=false"]))
    validate(compose([*tiny_overrides, "sweep.stale_after_s=60"]))


@pytest.mark.parametrize("name", ["../../../elsewhere", "a/b", "/abs/path", ".."])
@pytest.mark.usefixtures("migrated_store")
def test_names_that_become_paths_stay_inside(name: str, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    cfg = compose([*tiny_overrides, f"experiment_name='{name}'"])
    validate(cfg)
    root = Path(cfg.paths.checkpoints_dir).resolve()
    folder = checkpoint_folder(cfg).resolve()
    assert folder.parent.parent == root  # <checkpoints>/<safe experiment>/<run>-<fingerprint>
    Store.connect(store["uri"]).experiment_id(name, store["artifacts"])
    exp = MlflowClient(store["uri"]).get_experiment_by_name(name)
    assert exp.name == name  # MLflow keeps the name as written
    location = Path(exp.artifact_location.removeprefix("file://")).resolve()
    assert location.parent == Path(store["artifacts"]).resolve()


def test_credentials_never_logged() -> None:
    assert redact_uri("https://alice:s3cret@mlflow.example.org:5000/x") == "https://mlflow.example.org:5000/x"
    assert redact_uri("sqlite:////data/mlflow.db") == "sqlite:////data/mlflow.db"
    assert redact_text("python -m src.train -m logger.tracking_uri=http://bob:pw@h:5000 seed=0,1") == (
        "python -m src.train -m logger.tracking_uri=http://h:5000 seed=0,1"
    )
    cfg = compose(["logger.tracking_uri=http://bob:pw@127.0.0.1:5000"])
    record = RecordSpec.from_config(cfg, Identity.of(cfg).params)
    assert "bob" not in record.machine_paths_yaml and "pw" not in record.machine_paths_yaml + record.config_yaml
    assert "http://127.0.0.1:5000" in record.machine_paths_yaml


@pytest.mark.parametrize(
    "overrides",
    [[], ["logger.tracking_uri=http://bob:pw@127.0.0.1:5000", "ckpt_path=/elsewhere/last.ckpt"], ["logger=none"]],
)
def test_a_runs_config_files_are_omegaconfs_yaml(overrides: list[str]) -> None:
    """The record's two config files are split and written from plain containers (a config made again
    from the resolved one cost ~7 ms a job): the same text OmegaConf writes for the config split as a
    config, the machine's paths (credentials removed) in one, the rest in the other."""
    from omegaconf import OmegaConf

    from src.tracking.record import MACHINE_PATH_KEYS

    cfg = compose(overrides)
    record = RecordSpec.from_config(cfg, Identity.of(cfg).params)
    portable, machine = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)), OmegaConf.create()
    for key in MACHINE_PATH_KEYS:
        value = OmegaConf.select(portable, key, default=None)
        if value is not None:
            OmegaConf.update(machine, key, redact_uri(value) if key == "logger.tracking_uri" else value)
            *parents, leaf = key.split(".")
            (OmegaConf.select(portable, ".".join(parents)) if parents else portable).pop(leaf)
    assert record.config_yaml == OmegaConf.to_yaml(portable) and record.machine_paths_yaml == OmegaConf.to_yaml(machine)
    assert "paths:" in record.machine_paths_yaml and "paths:" not in record.config_yaml
    # The public call it falls back on where OmegaConf's private dumper moves writes the same text.
    from src.tracking.record import _yaml_through_a_config, split_machine_paths

    assert [_yaml_through_a_config(c) for c in split_machine_paths(cfg)][0] == record.config_yaml


class _Runs:
    """Pickled as a call of os.system: what a hostile checkpoint could hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_checkpoints_record_is_read_without_running_what_it_holds(tmp_path: Path) -> None:
    """The run state is read from the checkpoint's pickle without torch: no class outside Python's
    own plain ones is built, so a pickled call never runs; an archive without torch's pickle, or a
    pickle that is not Lightning's dict, is refused naming the file."""
    import pickle
    import zipfile

    from src.tracking.checkpoint_file import read_run_state

    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile.ckpt"
    with zipfile.ZipFile(hostile, "w") as archive:
        archive.writestr("hostile/data.pkl", pickle.dumps({"state_dict": {}, "callbacks": {"RunTracking": _Runs(marker)}}))
    assert read_run_state(hostile) == {}  # the call read as an opaque value, not a state
    assert not marker.exists()
    other = tmp_path / "other.ckpt"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("notes.txt", "a zip, not a checkpoint")
    with pytest.raises(ConfigError, match=r"other\.ckpt is not a readable checkpoint \(no data\.pkl in its archive\)"):
        read_run_state(other)
    listed = tmp_path / "list.ckpt"
    with zipfile.ZipFile(listed, "w") as archive:
        archive.writestr("list/data.pkl", pickle.dumps([1, 2]))
    with pytest.raises(ConfigError, match=r"list\.ckpt is not a Lightning checkpoint \(no state_dict\)"):
        read_run_state(listed)


@pytest.mark.fresh_store  # asserts that no store file is written
def test_not_a_checkpoint_names_the_file(tiny_overrides: list[str], tmp_path: Path, store: dict[str, str]) -> None:
    bogus = tmp_path / "bogus.ckpt"
    bogus.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"ckpt_path: .*bogus\.ckpt is not a readable checkpoint"):
        train(compose([*tiny_overrides, f"ckpt_path={bogus}"]))
    assert not Path(store["db"]).exists()
