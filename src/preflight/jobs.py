"""The jobs of a run or a sweep, expanded by Hydra's own override parser and basic sweeper.

`python -m src.train -m <overrides>` composes the sweep's master config from the overrides that are
not sweeps, prepends the sweeper's `params` (an experiment's own sweep list, such as the study's five
norms) to the command line, parses them (comma lists, `range(...)`, `glob(...)` over a config group)
and takes their cartesian product, later keys varying fastest. The same calls do it here, so a job
list printed by preflight is the one the sweep will run, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from src.core.paths import ConfigError, compose

BASIC_SWEEPER = "basic"  # Hydra's own sweeper: its `hydra/sweeper` choice


def expand_jobs(overrides: Sequence[str], multirun: bool) -> Sweep:
    """The override list of every job: one job without `multirun`, the sweep's jobs with it."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from src.core.overrides import job_overrides
    from src.core.paths import CONF_DIR, register_resolvers

    if not multirun:
        return Sweep([list(overrides)])
    register_resolvers()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            # glob(...) lists a config group's options: the parser needs the config loader for it.
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
            parsed = parser.parse_overrides(list(overrides))
            master = compose([o.input_line for o in parsed if not o.is_sweep_override()], with_hydra=True)
            sweeper = master.hydra.sweeper
            rounds = SeedRounds.of(sweeper)
            if master.hydra.runtime.choices.get("hydra/sweeper") != BASIC_SWEEPER and rounds is None:
                raise ConfigError(
                    f"hydra/sweeper: {sweeper.get('_target_')} plans its jobs at run time; preflight expands "
                    "the basic sweeper's lists and a sequential sweeper's first round only"
                )
            params = OmegaConf.to_container(sweeper.params, resolve=True) if sweeper.get("params") else {}
            assert isinstance(params, dict)
            lines = [*(f"{k}={v}" for k, v in params.items()), *overrides]
            if rounds is not None:  # its seeds are its own: the first round runs seeds 0 .. first_seeds - 1
                lines.append(f"seed=range(0,{rounds.first_seeds})")
            jobs = job_overrides(parser.parse_overrides(lines))
    except HydraException as err:
        raise ConfigError(" ".join(str(err).split())) from err
    return Sweep(jobs, rounds)


@dataclass(frozen=True)
class SeedRounds:
    """A sequential sweeper (`hydra/sweeper=sequential`): seeds added per variant in rounds, from
    `first_seeds` up to `max_seeds`, until every comparison is decided."""

    first_seeds: int
    max_seeds: int

    @classmethod
    def of(cls, sweeper: DictConfig) -> SeedRounds | None:
        first, most = sweeper.get("first_seeds"), sweeper.get("max_seeds")
        if not (isinstance(first, int) and isinstance(most, int)):
            return None
        return cls(first, most)



@dataclass(frozen=True)
class Sweep:
    jobs: list[list[str]]
    rounds: SeedRounds | None = None  # a sequential sweeper's: `jobs` is then its first round
