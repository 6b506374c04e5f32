"""Each job's config composed once per process: Hydra's own composition, remembered.

A multirun asks Hydra for one job's config several times: the sweep's checks before launch (every
job refused or fingerprinted before the first trains), Hydra's sweeper (`validate_batch_is_legal`),
and the launcher that runs the job. Each ask was a full composition (the defaults tree walked, every
YAML file merged, ~0.3 s on two cores), so a 6-job sweep loaded the config 21 times. Here:

- the sweep's own config, which Hydra composes twice at the start (once only to read `hydra.mode`),
  is composed once;
- a composition is remembered per (config name, overrides, mode): a job's checks before launch,
  the sweeper and the launcher of one process share one, each getting its own copy (launchers
  write into the config they get): kept pickled, since unpickling an OmegaConf config is some 20-50x
  faster than `copy.deepcopy` of it (~1 ms against 17-68 ms for the training config, measured here);
- inside a composition, the two costly steps, the defaults list and the merge of its files, depend
  only on the config name and the *group* choices (`norm=...`, `experiment=...`); a `seed=0..99`
  sweep walks the tree once and Hydra then applies each job's values, as it always does.

What comes out is what Hydra makes without the memo, key for key (tests/test_compositions.py
compares them). Hydra 1.3's internals are patched, on this process only: hydra-core is pinned below
1.4 in pyproject.toml, and `install` refuses to patch a ConfigLoaderImpl that lacks the methods.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from omegaconf import DictConfig, OmegaConf

_installed = False
MULTIRUN_LINE = "hydra.mode=MULTIRUN"  # what Hydra's `_run_app` appends to a multirun's overrides


def _group_lines(repo: Any, overrides_list: list[Any]) -> tuple[str, ...]:
    """The overrides that choose a config group's option (Hydra's own split, `defaults_list.Overrides`):
    they alone shape the defaults list; a sweep override is left out there too."""
    return tuple(
        o.input_line
        for o in overrides_list
        if not o.is_sweep_override() and repo.group_exists(o.key_or_group) and not isinstance(o.value(), dict)
    )


def _value_overrides(repo: Any, overrides_list: list[Any]) -> list[Any]:
    return [
        o
        for o in overrides_list
        if not o.is_sweep_override() and (isinstance(o.value(), dict) or not repo.group_exists(o.key_or_group))
    ]


def _sources(repo: Any) -> tuple[tuple[str, str], ...]:
    """Where a repository reads configs from: a memo entry holds for the same search path only."""
    return tuple((str(s.provider), str(s.path)) for s in repo.get_sources())


def install() -> None:
    """Remember compositions in this process (idempotent). Call it before a sweep composes its jobs."""
    global _installed
    if _installed:
        return
    from hydra._internal import config_loader_impl
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    for name in ("load_configuration", "validate_sweep_overrides_legal", "_compose_config_from_defaults_list"):
        if not hasattr(ConfigLoaderImpl, name):  # another Hydra: compose as it does, unremembered
            return
    make_list = config_loader_impl.create_defaults_list
    lists: dict[tuple[Any, ...], Any] = {}
    merged: dict[int, bytes] = {}

    def create_defaults_list(repo: Any, config_name: str | None, overrides_list: list[Any], prepend_hydra: bool, skip_missing: bool) -> Any:
        key = (_sources(repo), config_name, prepend_hydra, skip_missing, _group_lines(repo, overrides_list))
        if key not in lists:
            lists[key] = make_list(repo, config_name, overrides_list, prepend_hydra=prepend_hydra, skip_missing=skip_missing)
        # The same tree and choices; this call's own values, which Hydra applies after the merge.
        return dataclasses.replace(lists[key], config_overrides=_value_overrides(repo, overrides_list))

    compose_defaults = ConfigLoaderImpl._compose_config_from_defaults_list

    def compose_from_defaults(self: Any, defaults: list[Any], repo: Any) -> DictConfig:
        key = id(defaults)  # a list `lists` holds for the process's life: its id is not reused
        known = any(made.defaults is defaults for made in lists.values())
        if not known:
            return compose_defaults(self, defaults, repo)
        if key not in merged:
            merged[key] = pickle.dumps(compose_defaults(self, defaults, repo))
        return pickle.loads(merged[key])

    load_configuration = ConfigLoaderImpl.load_configuration
    loaded: dict[tuple[Any, ...], bytes] = {}

    def remembered_configuration(
        self: Any,
        config_name: str | None,
        overrides: list[str],
        run_mode: Any,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        # A sweep's config is composed first to read its mode (Hydra's `get_mode`), then again with
        # `hydra.mode=MULTIRUN` appended: one composition, the mode set on the copy as Hydra sets it.
        mode_line = MULTIRUN_LINE if overrides and overrides[-1] == MULTIRUN_LINE else None
        plain = list(overrides[:-1]) if mode_line else list(overrides)
        key = (_sources(self.repository), config_name, tuple(plain), run_mode, from_shell)
        if key not in loaded:
            loaded[key] = pickle.dumps(load_configuration(self, config_name, plain, run_mode, from_shell, validate_sweep_overrides))
        elif validate_sweep_overrides:  # the earlier call skipped this check (Hydra's `get_mode` does)
            from hydra.core.override_parser.overrides_parser import OverridesParser

            parsed = OverridesParser.create().parse_overrides(overrides=plain)
            self.validate_sweep_overrides_legal(overrides=parsed, run_mode=run_mode, from_shell=from_shell)
        made: DictConfig = pickle.loads(loaded[key])
        if mode_line:
            from hydra.types import RunMode

            made.hydra.mode = RunMode.MULTIRUN
            made.hydra.overrides.hydra.append(mode_line)
        return made

    ConfigLoaderImpl.load_configuration = remembered_configuration  # type: ignore[method-assign]
    config_loader_impl.create_defaults_list = create_defaults_list  # type: ignore[assignment]
    ConfigLoaderImpl._compose_config_from_defaults_list = compose_from_defaults  # type: ignore[method-assign]
    _installed = True


def job_config(master: DictConfig, overrides: list[str], loader: Any = None) -> DictConfig:
    """One job's config (without `hydra`), resolved as the job itself will see it: its own
    `hydra.runtime.choices` behind `${hydra:...}`. `loader`: the sweep's config loader (Hydra's own
    by default); the composition is remembered once `install` ran."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    loader = loader or GlobalHydra.instance().config_loader()
    config = loader.load_sweep_config(master, list(overrides))
    hydra_state = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(config)
    try:
        with read_write(config), open_dict(config):
            del config["hydra"]
        OmegaConf.resolve(config)
    finally:
        if hydra_state is not None:
            HydraConfig.instance().set_config(hydra_state)
    return config
