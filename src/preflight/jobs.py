"""The jobs of a run or a sweep, expanded by Hydra's own override parser and basic sweeper.

`python -m src.train -m <overrides>` composes the sweep's master config from the overrides that are
not sweeps, prepends the sweeper's `params` (an experiment's own sweep list, such as the study's five
norms) to the command line, parses them (comma lists, `range(...)`, `glob(...)` over a config group)
and takes their cartesian product, later keys varying fastest. The same calls do it here, so a job
list printed by preflight is the one the sweep will run, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from src.paths import ConfigError, compose

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def expand_jobs(overrides: Sequence[str], multirun: bool) -> list[list[str]]:
    """The override list of every job: one job without `multirun`, the sweep's jobs with it."""
    from hydra import initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra

    from src.paths import CONF_DIR, register_resolvers

    if not multirun:
        return [list(overrides)]
    register_resolvers()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            # glob(...) lists a config group's options: the parser needs the config loader for it.
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
            parsed = parser.parse_overrides(list(overrides))
            master = compose([o.input_line for o in parsed if not o.is_sweep_override()], with_hydra=True)
            sweeper = master.hydra.sweeper
            if sweeper.get("_target_") != BASIC_SWEEPER:
                raise ConfigError(
                    f"hydra/sweeper: {sweeper.get('_target_')} plans its jobs at run time; preflight expands "
                    "the basic sweeper's lists only"
                )
            params = OmegaConf.to_container(sweeper.params, resolve=True) if sweeper.get("params") else {}
            assert isinstance(params, dict)
            lines = [*(f"{k}={v}" for k, v in params.items()), *overrides]
            (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(lines), max_batch_size=None)
    except HydraException as err:
        raise ConfigError(" ".join(str(err).split())) from err
    return [list(job) for job in batch]
