"""The torch-free base of the project: where things live, the config resolvers, `ConfigError`.

Every default location (token cache, MLflow store, artifacts, reports, checkpoints) is owned by
`conf/paths/default.yaml`; Python reads it by composing the config (`compose`), so an override such
as `paths.mlflow_db=/elsewhere/mlflow.db` reaches training, `python -m src.report`, `make ui` and
the notebook alike. Nothing here imports torch, Lightning or the model.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from src.core.schema import schema_of, unknown_key_line

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # src/core/paths.py -> the project root
CONF_DIR = PROJECT_ROOT / "conf"


class ConfigError(ValueError):
    """A config value that cannot run; the message names the field."""


class PeerRefused(Exception):
    """Rank 0 refused the job before it trained; this rank stops too (rank 0 says why)."""


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: where the folders made later would be created."""
    path = path.expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def unwritable_reason(folder: Path) -> str | None:
    """Why no file can be created in `folder` (or in its nearest existing ancestor, where the missing
    folders would be made), or None; tries it, since permissions, read-only mounts and full quotas
    all show only then. Creates nothing that stays."""
    base = nearest_existing(folder)
    if not base.is_dir():
        return f"{base} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=base, prefix=".write-check-"):
            pass
    except OSError as err:
        return f"{base} is not writable ({err.strerror})"
    return None


def require_writable(folder: Path, field: str, then: str) -> None:
    """`ConfigError("<field>: <why not>; <then>")` when no file can be created in `folder`; `then`
    says what goes there and what to do instead."""
    problem = unwritable_reason(folder)
    if problem:
        raise ConfigError(f"{field}: {problem}; {then}")


def register_resolvers() -> None:
    # ${project_root:} lets every path default to the checkout, whatever the working directory.
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
    # ${gpus_per_node:<accelerator>,<devices>}: a GPU job asks SLURM for its GPUs; a CPU job for none
    # (sbatch refuses a gres on a partition without GPUs).
    if not OmegaConf.has_resolver("gpus_per_node"):
        OmegaConf.register_new_resolver(
            "gpus_per_node", lambda accelerator, devices: int(devices) if str(accelerator) in ("gpu", "cuda") else None
        )


def compose(overrides: Sequence[str] = (), config_name: str = "train", with_hydra: bool = False) -> DictConfig:
    """The training config as `python -m src.train <overrides>` would see it (without running it);
    `with_hydra` keeps the `hydra` node (sweeper parameters, launcher). A value the schema refuses
    (`seed=abc`), an unknown option (`norm=nope`) or a bad override raises ConfigError, in one line."""
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_resolvers()
    refuse_misread_overrides(overrides)
    try:
        with hydra_initialized():
            cfg = hydra_compose(config_name, overrides=list(overrides), return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(compose_error_line(err)) from err
    return cfg if with_hydra else without_hydra(cfg)


def without_hydra(cfg: DictConfig) -> DictConfig:
    """`cfg` without its `hydra` node, as a job sees it: a norm YAML that names no `norm_type` (one of
    the user's, with `_target_`) takes its file's name, which `${hydra:...}` reads from that node."""
    from omegaconf import open_dict, read_write

    from src.core.schema import NORM_TYPE_OF_YAML

    norm = cfg.get("norm")
    with read_write(cfg), open_dict(cfg):
        if isinstance(norm, DictConfig) and OmegaConf.to_container(norm).get("norm_type") == NORM_TYPE_OF_YAML:
            norm.norm_type = str(cfg.hydra.runtime.choices.norm)
        del cfg["hydra"]
    return cfg


def user_config_dirs() -> list[Path]:
    """The config folders of the user's on Hydra's search path (`--config-dir`, `hydra.searchpath`):
    every file source but conf/; none outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    folders = [Path(str(s.path)) for s in HydraConfig.get().runtime.config_sources if s.schema == "file"]
    return [f for f in folders if f.resolve() != CONF_DIR.resolve()]


@contextlib.contextmanager
def hydra_initialized() -> Iterator[None]:
    """Hydra set up on conf/, unless it is already (inside a Hydra app or another compose)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def group_options(group: str) -> list[str]:
    """The options of config group `group` (`norm`, `hydra/launcher`): conf/'s files and Hydra's plugins'."""
    from hydra.core.global_hydra import GlobalHydra

    with hydra_initialized():
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


def _is_group(path: str) -> bool:
    # conf/ holds the project's groups; Hydra's own (hydra/launcher, hydra/sweeper) come from plugins too.
    return bool(group_options(path)) if path.startswith("hydra/") else (CONF_DIR / path).is_dir()


def refuse_misread_overrides(overrides: Sequence[str]) -> None:
    """Refuse, naming the override, two that Hydra takes but never as a user means them:
    - a list for a config group, `norm=[hand_rmsnorm,no_norm]` (Hydra's own hint for `norm=a,b`
      without -m): Hydra merges the options into one config, the last winning, and trains that alone;
    - a group's node set to an option's name, `hydra.launcher=joblib` for `hydra/launcher=joblib`:
      Hydra fails only inside the sweep, after its run is recorded, with "Input config does not have
      a `_target_` field"."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return  # malformed: Hydra refuses it itself (compose_error_line)
    for override in parsed:
        key, line = override.key_or_group, override.input_line
        value = None if override.is_sweep_override() else override.value()
        if isinstance(value, list) and len(value) > 1 and _is_group(key):
            raise ConfigError(
                f"{line}: a list of {key} options merges them into one config (the last, {value[-1]}, wins); "
                f"a sweep of them is -m {key}={','.join(map(str, value))}"
            )
        group = key.replace(".", "/")
        if key.count(".") == 1 and isinstance(value, str) and _is_group(group):
            raise ConfigError(
                f"{line}: {key} is the config that a {group} option sets, not the option's name; choose the "
                f"option with {group}={value} (valid choices: {', '.join(group_options(group))})"
            )


def preset_norms(preset: str) -> list[str]:
    """The norms `experiment=<preset>` sweeps, as its YAML lists them (`hydra.sweeper.params.norm`):
    the preset is their one owner, so a benchmark's or a test's default follows an edit there."""
    return [n.strip() for n in str(compose([f"experiment={preset}"], with_hydra=True).hydra.sweeper.params.norm).split(",")]


def override_grammar_url() -> str:
    """The override grammar's page for the Hydra installed: Hydra's own errors link version 1.2's."""
    import hydra

    major, minor = hydra.__version__.split(".")[:2]
    return f"https://hydra.cc/docs/{major}.{minor}/advanced/override_grammar/basic"


# Characters a shell acts on inside double quotes: where a value holds one, the shell form is left out.
_SHELL_ACTIVE_IN_DOUBLE_QUOTES = set('"$`\\!')


def _quoted(text: str) -> str:
    quote = "'" if "'" not in text else '"'
    return f"{quote}{text}{quote}"


def quoted_value(value: str) -> str:
    """An override's value quoted as Hydra reads it: a list (`[a b,c]`) or a sweep (`a b,c`) element by
    element — the whole of `'[my claims ü]'` is one string, which a list key refuses — else whole."""
    bracketed = value.startswith("[") and value.endswith("]")
    inner = value[1:-1] if bracketed else value
    if (bracketed or "," in inner) and not set("[]{}'\"") & set(inner):
        elements = ",".join(_quoted(e.strip()) if e.strip() else e for e in inner.split(","))
        return f"[{elements}]" if bracketed else elements
    return _quoted(value)


def override_parse_line(override: str, message: str) -> str:
    """Hydra's refusal of an override it cannot parse, as one line. Its lexer takes only ASCII
    letters, digits and a few symbols outside quotes (`experiment_name=ñörm` fails), so a value it
    stops inside is advised quoted, in the form that survives the shell too; Hydra's own text
    (a caret on a second line, a link to another version's grammar) says neither."""
    lines = message.splitlines()
    key, sep, value = override.partition("=")
    lexer = "LexerNoViableAltException: "
    if len(lines) > 1 and lines[0].startswith(lexer) and "^" in lines[1]:
        at = lines[1].index("^") - len(lexer)  # the caret's column in the override
        if not 0 <= at < len(override):
            at = len(override) - 1
        if sep and len(key) < at and value[:1] not in ("'", '"'):
            quoted = f"{key}={quoted_value(value)}"
            shell = "" if _SHELL_ACTIVE_IN_DOUBLE_QUOTES & set(quoted) else f' (on a shell\'s command line: "{quoted}")'
            return (
                f"{override}: {override[at]!r} is not allowed in an unquoted value; quote the value: "
                f"{quoted}{shell}; the override grammar: {override_grammar_url()}"
            )
        return (
            f"{override}: Hydra's override parser cannot read {override[at]!r} at character {at + 1}; "
            f"the override grammar: {override_grammar_url()}"
        )
    why = next((line for line in lines if line.strip() and not line.startswith("See https://")), message)
    return f"{override}: {' '.join(why.split())}; the override grammar: {override_grammar_url()}"


def compose_error_line(err: Exception) -> str:
    """Hydra's or OmegaConf's composition error as one line that names the key: `seed: 'abc' is not
    an integer`, `norm: no option 'nope'; valid choices: dyt, ...`; Hydra's own text otherwise."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ValidationError

    if isinstance(err, OverrideParseException):
        return override_parse_line(err.override, err.message)
    cause = err if isinstance(err, ValidationError) else err.__cause__
    if isinstance(cause, ValidationError) and cause.full_key:
        value, hint = getattr(cause, "value", None), str(getattr(cause, "msg", cause)).split("\n")[0]
        if any(t in hint for t in ("Union[int, float]", "Integer", "Float")):  # src.core.schema.Number, int, float
            hint = f"{value!r} is not {'an integer' if 'Integer' in hint else 'a number'}"
        elif "is not a valid bool" in hint:
            hint = f"{value!r} is not a boolean (true or false)"
        elif "is not Optional" in hint:
            hint = "must not be null"
        # The key as the override wrote it (`optim.betas`, not the list index OmegaConf names).
        override = str(err).removeprefix("Error merging override ")
        key = override.split("=")[0].lstrip("+~") if override != str(err) else cause.full_key
        return f"{key}: {hint}"
    # A key the config lacks: Hydra suggests appending it with `+`, which under a schema-typed group
    # adds a key nothing reads (validate refuses it); name the key and the node's keys instead.
    found = re.match(r"Could not override '([^']+)'\.", str(err))
    if found and cause is not None and isinstance(getattr(cause, "parent_node", None), DictConfig):
        key, node = found.group(1), cause.parent_node
        kind = schema_of(node)
        return unknown_key_line(key, [f.name for f in fields(kind)] if kind is not None else [str(k) for k in node])
    # A sweep on a command line without -m: Hydra's three-way advice (a list, a quoted string, --multirun)
    # is wrong for a config group, where a list would merge the options.
    found = re.match(r"(Ambiguous value for argument|Sweep parameters) '([^=']+)=(.+?)'", str(err))
    if found:
        kind, key, value = found.groups()
        quoted = f", or quote the value for one string ({key}='{value}')" if kind.startswith("Ambiguous") else ""
        return f"{key}={value}: a sweep, which only -m (--multirun) runs: add -m{quoted}"
    # `+norm=x` for a group that has an option already: Hydra's advice is for a defaults list in YAML.
    found = re.match(r"Multiple values for (\S+)\. To override a value use 'override \1: (.+)'", str(err))
    if found:
        group, option = found.groups()
        return f"+{group}={option}: {group} has an option already; choose another without the '+': {group}={option}"
    # A group file the schema refuses: "In 'model/x': ValidationError raised while composing config:\n<why>\n    full_key: model.emb_dim ..."
    found = re.match(r"In '([^']+)': \w+ raised while composing config:\n(.+)\n\s+full_key: (\S+)", str(err))
    if found:
        where, why, key = found.groups()
        return f"{key}: {why} (conf/{where}.yaml)"
    if isinstance(err, MissingConfigException) and (err.missing_cfg_file or "").startswith("hydra/launcher/submitit"):
        return "cluster=slurm: Hydra's submitit launcher is not installed; pip install -e '.[slurm]'"
    if isinstance(err, MissingConfigException) and err.options and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        return f"{group}: no option {name!r} (conf/{group}/); valid choices: {', '.join(err.options)}"
    return " ".join(str(err).split())


def tracking_uri(overrides: Sequence[str] = ()) -> str:
    """The MLflow store training writes to, for these overrides (`paths.mlflow_db=...`, ...)."""
    return str(compose(overrides).logger.tracking_uri)

