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

A memo entry holds for the same config files only: its key carries a digest of every YAML file
under each file search path (resolved against the working folder when it is relative), so a file
edited, added or removed between two sweeps of one process (a notebook, the tests), or a new working
folder under a relative search path, composes afresh.

What comes out is what Hydra makes without the memo, key for key (tests/test_compositions.py
compares them). Hydra 1.3's internals are patched, on this process only, and only on the Hydra it was
written for (`HYDRA_WRITTEN_FOR`, src.core.patches): on another (or with NORMSWEEP_UNPATCHED set) each
config is composed as Hydra composes it, after one warning line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

_installed = False
_unpatched: dict[str, Any] = {}  # Hydra's own functions, as `install` found them (`uninstall` puts them back)
_made = [0]  # the compositions Hydra made in this process, the memo's misses (src/bench/overhead.py counts them)
CONFIG_SUFFIXES = (".yaml", ".yml")
MULTIRUN_LINE = "hydra.mode=MULTIRUN"  # what Hydra's `_run_app` appends to a multirun's overrides
SEARCHPATH_KEY = "hydra.searchpath"  # the key whose overrides add config folders (Hydra's `_process_config_searchpath`)


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


def _files_digest(folder: str) -> str:
    """The digest of a config folder's YAML files, names and contents (its absolute path included:
    a relative search path means another folder in another working folder)."""
    root = Path(folder).resolve()
    digest = hashlib.sha256(str(root).encode())
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.suffix in CONFIG_SUFFIXES and p.is_file()):
            digest.update(b"\0" + str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _sources(repo: Any) -> tuple[tuple[str, str, str], ...]:
    """Where a repository reads configs from, and what its files hold: a memo entry holds for the same
    search path and the same files only. Packaged and in-memory sources are not files a user edits."""
    return tuple(
        (str(s.provider), str(s.path), _files_digest(s.path) if s.scheme() == "file" else "")
        for s in repo.get_sources()
    )


def install() -> None:
    """Remember compositions in this process (idempotent). Call it before a sweep composes its jobs."""
    global _installed
    if _installed:
        return
    from hydra._internal import config_loader_impl
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from src.core.patches import HYDRA_WRITTEN_FOR, patchable

    patched = ("load_configuration", "validate_sweep_overrides_legal", "_compose_config_from_defaults_list",
               "_parse_overrides_and_create_caching_repo")  # fmt: skip
    if not patchable(
        "each config composed once per process (src/core/compositions.py)", HYDRA_WRITTEN_FOR,
        "each is composed as Hydra composes it, every time it is asked for",
    ) or not all(hasattr(ConfigLoaderImpl, name) for name in patched):  # fmt: skip
        return
    _unpatched.update(
        load_configuration=ConfigLoaderImpl.load_configuration,
        create_defaults_list=config_loader_impl.create_defaults_list,
        _compose_config_from_defaults_list=ConfigLoaderImpl._compose_config_from_defaults_list,
    )
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
    search_paths: dict[tuple[Any, ...], tuple[tuple[str, str, str], ...]] = {}
    validated: set[tuple[Any, ...]] = set()  # compositions whose sweep overrides Hydra's check passed

    def searched_sources(self: Any, config_name: str | None, plain: list[str]) -> tuple[tuple[str, str, str], ...]:
        """`_sources` of the repository this composition reads: the loader's search path with the
        primary config's and the overrides' `hydra.searchpath` added. Finding that path makes a
        repository and parses every override (~10-15 ms, three times a job: the sweep's checks, the
        sweeper, the launcher), so it is remembered by what decides it: the loader's own sources with
        their files (the primary config's `hydra.searchpath` is in one of them) and the overrides that
        can name `hydra.searchpath` (any that mentions it). Each folder's files are digested every time."""
        named = tuple(line for line in plain if SEARCHPATH_KEY in line)
        base = _sources(self.repository)
        key = (base, config_name, named)
        if key not in search_paths:
            # A relative search path is another folder in another working folder: digested where it is now.
            _, searched = self._parse_overrides_and_create_caching_repo(config_name, plain)
            search_paths[key] = tuple((str(s.provider), str(s.path), s.scheme()) for s in searched.get_sources())
        digested = {path: digest for _, path, digest in base if digest}  # the loader's folders, digested just now
        return tuple(
            (provider, path, (digested.get(path) or _files_digest(path)) if scheme == "file" else "")
            for provider, path, scheme in search_paths[key]
        )

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
        key = (searched_sources(self, config_name, plain), config_name, tuple(plain), run_mode, from_shell)
        if key not in loaded:
            _made[0] += 1
            loaded[key] = pickle.dumps(load_configuration(self, config_name, plain, run_mode, from_shell, validate_sweep_overrides))
        elif validate_sweep_overrides and key not in validated:  # the earlier call skipped this check (Hydra's `get_mode` does)
            from hydra.core.override_parser.overrides_parser import OverridesParser

            parsed = OverridesParser.create().parse_overrides(overrides=plain)
            self.validate_sweep_overrides_legal(overrides=parsed, run_mode=run_mode, from_shell=from_shell)
        if validate_sweep_overrides:  # the same overrides in the same mode pass it again: checked once
            validated.add(key)
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


def made() -> int | None:
    """How many configs Hydra composed in this process since `install` (None: the memo is not installed)."""
    return _made[0] if _installed else None


def uninstall() -> None:
    """Put Hydra's own functions back (the tests' fallback runs; `install` patches them again)."""
    global _installed
    if not _installed:
        return
    from hydra._internal import config_loader_impl
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl.load_configuration = _unpatched["load_configuration"]  # type: ignore[method-assign]
    config_loader_impl.create_defaults_list = _unpatched["create_defaults_list"]
    ConfigLoaderImpl._compose_config_from_defaults_list = _unpatched["_compose_config_from_defaults_list"]  # type: ignore[method-assign]
    _installed = False


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
