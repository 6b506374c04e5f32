"""A claims file, as data: its source, its published table and setting (both optional), and its claims.

A claims file (`conf/claims/<name>.yaml`, or `claims/<name>.yaml` in a config folder of the user's on
Hydra's search path, as their norms are) states hypotheses before a sweep tests them; the report's
claims sections (src.report.judge.study) judge every chosen file (`report.claims`) by one rule.
`ClaimsSchema` is its format: OmegaConf merges the YAML onto it, so a key the format does not know or a
value of the wrong type is refused naming it; `check` adds what a type cannot say (a known variant,
metric or model size; a size that can be claimed). Each refusal is one ConfigError line naming the
file and the key, raised before anything trains or is recorded (src.launch.callbacks.check_reference).

Each claim is a hypothesis of its own: per part, the effect it speaks of (a pair and a metric, a
contrast of two pairs, or one norm's trend over model sizes), what it asserts (a difference, an
equivalence, an event, a trend), the size its words give, and the `Domain` in which its figure can be
expected (device and kernels, scale, precision). How a sweep's interval is read against it is
src/stats/verdicts.py. docs/claims.md documents the format field by field.

Torch- and pandas-free: read once per process and file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from src.core.paths import CONF_DIR, ConfigError
from src.stats.verdicts import Asserts

CLAIMS_GROUP = "claims"  # conf/claims/<name>.yaml, and <config-dir>/claims/<name>.yaml of the user's
STUDY_FILE = "rmsnorm_study"  # the study this project reproduces: report.claims' default


class Metric(StrEnum):
    """What a claim measures (each member named as its file spells it: OmegaConf reads an Enum by name)."""

    train_time_s = "train_time_s"  # training time: b / a - 1 (the speed check's kernel rounds where it timed them)
    test_loss = "test_loss"  # test loss: b - a, nats
    divergence = "divergence"  # whether b's loss went NaN (an event)
    norm_share = "norm_share"  # a norm's share of a training step, per model size (a trend)


class Kind(StrEnum):
    """What a part asserts of its effect (`Asserts`, and a trend over model sizes)."""

    difference = Asserts.DIFFERENCE.value
    equivalence = Asserts.EQUIVALENCE.value
    event = Asserts.EVENT.value
    trend = "trend"


SPEED, LOSS, STABILITY, SHARE = (m.value for m in Metric)
DIFFERENCE, EQUIVALENCE, EVENT, TREND = Asserts.DIFFERENCE, Asserts.EQUIVALENCE, Asserts.EVENT, Kind.trend.value
# The kinds each metric can be asserted with: a loss never diverges by a size, a trend is of a share.
KINDS_OF = {SPEED: (DIFFERENCE, EQUIVALENCE), LOSS: (DIFFERENCE, EQUIVALENCE), STABILITY: (EVENT,), SHARE: (TREND,)}
HALF_PRECISION = ("fp16_mixed", "bf16_mixed")  # 16-bit autocast: a norm's kernels move 2 bytes a value either way
FP16 = ("fp16_mixed",)  # fp16's narrow exponent range: bf16 keeps fp32's


# --- the format: what OmegaConf merges a claims file onto -------------------------------------------------


@dataclass
class SourceSchema:
    title: str = "the published study"  # the section is "Against <title>"
    link: str = ""
    figures_from: str = ""  # where its table's figures come from
    setting_from: str = ""  # where its setting comes from


@dataclass
class RowSchema:
    train_time_s: float = math.nan
    tokens_per_sec: float = math.nan
    test_loss: float = math.nan
    nan_from_step: int | None = None  # the step by which the loss was NaN


@dataclass
class SettingSchema:
    device: str = ""
    devices: int = 1
    cuda: bool = False
    model: str = ""
    n_params: int = 0
    tokens: int = 0
    precision: str = ""
    seeds: int = 1
    preset: str | None = None  # conf/experiment/<preset>.yaml: its run configuration, line by line
    model_axes: list[str] = field(default_factory=list)  # model keys it fixed: a run off them is another model
    code: list[str] = field(default_factory=list)  # what its code does that a config can change
    scale_factor: float = 2.0  # a model within this factor of its parameters counts as its scale


@dataclass
class DomainSchema:
    cuda: bool = False
    gpu: str = ""
    params: bool = False
    tokens: bool = False
    precision: list[str] = field(default_factory=list)


@dataclass
class PartSchema:
    b: str = ""
    a: str | None = None
    asserts: Kind = Kind.difference
    label: str = ""
    size: list[float] | None = None
    minus: list[str] | None = None
    sizes: list[str] | None = None  # a trend: the model sizes (conf/model/<name>.yaml), smallest first


@dataclass
class ClaimSchema:
    statement: str = ""
    metric: Metric = Metric.train_time_s
    parts: list[PartSchema] = field(default_factory=list)
    domain: str = "any"  # a name in `domains`, or `any`
    words: str = ""
    note: str = ""
    open_question: bool = False  # the seed-spread question of a single-seed loss gap is asked after it
    collapse_within: int | None = None  # an event: the steps its source says a collapse typically takes


@dataclass
class ClaimsSchema:
    source: SourceSchema = field(default_factory=SourceSchema)
    table: dict[str, RowSchema] = field(default_factory=dict)
    setting: SettingSchema | None = None
    domains: dict[str, DomainSchema] = field(default_factory=dict)
    claims: list[ClaimSchema] = field(default_factory=list)


# --- the data the judging code reads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """One row of a source's table (NaN where it has no number)."""

    train_time_s: float
    tokens_per_sec: float
    test_loss: float
    nan_from_step: int | None = None  # the step by which the loss was NaN (the study's no-norm run)


@dataclass(frozen=True)
class Setting:
    """Where a result was made: the few facts that decide how far a comparison carries."""

    device: str
    devices: int
    cuda: bool
    model: str
    n_params: int
    tokens: int
    precision: str
    seeds: int
    preset: str | None = None
    model_axes: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    scale_factor: float = 2.0


@dataclass(frozen=True)
class Domain:
    """The setting in which a claim's figure can be expected; outside it a claim is *not applicable
    here* (the sweep's own figure is still shown)."""

    cuda: bool = False  # timed or computed by CUDA kernels
    gpu: str = ""  # the GPU the source timed, as a run's device name spells it ("" any)
    params: bool = False  # the model within the setting's scale factor of its parameters
    tokens: bool = False  # at least its tokens per parameter / scale factor
    precision: tuple[str, ...] = ()  # the precisions the figure holds in (() any)


Table = dict[str, Published]


@dataclass(frozen=True)
class Part:
    """One effect a claim speaks of: b against a (or, with `minus`, that effect less another pair's; or
    for a trend b's share of a step over `sizes`), what it asserts of it and the size its words give
    (signed, low <= high; for an equivalence the band around zero). The band a sweep is read against is
    that size joined with the source's own figure for this part (`band`); without a size, the figure alone."""

    a: str | None  # None: a claim about b alone (no_norm's divergence, a norm's share)
    b: str
    asserts: str  # DIFFERENCE, EQUIVALENCE, EVENT or TREND
    label: str = ""
    size: tuple[float, float] | None = None
    minus: tuple[str, str] | None = None  # (a', b'): the effect is (b vs a) - (b' vs a')
    sizes: tuple[str, ...] = ()  # a trend: the model sizes, smallest first
    table: Table = field(default_factory=dict, compare=False, hash=False, repr=False)  # its file's

    def published(self, metric: str) -> float:
        """The source's figure for this part: b / a - 1 of training time, b - a of test loss, or the
        step b's loss went NaN (NaN where its table has none)."""
        if metric == STABILITY:
            row = self.table.get(self.b)
            return float(row.nan_from_step) if row is not None and row.nan_from_step is not None else math.nan
        if self.a is None or metric == SHARE:
            return math.nan
        value = table_effect(self.table, metric, self.a, self.b)
        return value - table_effect(self.table, metric, *self.minus) if self.minus else value

    def band(self, metric: str) -> tuple[float, float]:
        """The claimed band: its size joined with its figure (a trend: the side it claims, unbounded)."""
        if self.asserts == TREND:
            return self.size or (-math.inf, 0.0)
        figure = self.published(metric)
        if math.isnan(figure):
            return self.size if self.size else (math.nan, math.nan)
        low, high = self.size if self.size else (figure, figure)
        return min(low, figure), max(high, figure)

    def sign(self, metric: str) -> int:
        """The side of zero claimed (0 for an equivalence): its figure's, else its size's."""
        if self.asserts == EQUIVALENCE:
            return 0
        figure = self.published(metric)
        if math.isnan(figure) and self.size:
            figure = self.size[1] if self.size[1] < 0 else self.size[0]
        if math.isnan(figure) and self.asserts == TREND:
            figure = -1.0
        return int(math.copysign(1, figure))

    def variants(self) -> tuple[str, ...]:
        return tuple(v for v in (self.a, self.b, *(self.minus or ())) if v is not None)


def table_effect(table: Table, metric: str, a: str, b: str) -> float:
    """b against a in a source's table: b / a - 1 of training time, b - a of test loss (NaN: no row)."""
    if a not in table or b not in table:
        return math.nan
    if metric == SPEED:
        return table[b].train_time_s / table[a].train_time_s - 1
    return table[b].test_loss - table[a].test_loss


@dataclass(frozen=True)
class Claim:
    number: int
    statement: str  # as its source put it
    metric: str  # SPEED, LOSS, STABILITY or SHARE
    parts: tuple[Part, ...]
    domain: Domain
    words: str = ""  # how the size was read from its words
    note: str = ""  # what its source itself said of it
    open_question: bool = False
    collapse_within: int | None = None

    def variants(self) -> set[str]:
        return {v for p in self.parts for v in p.variants()}


StudyClaim = Claim  # the name the judging code has used since the study's claims were its only ones


@dataclass(frozen=True)
class ClaimsFile:
    """One claims file, loaded and checked."""

    name: str  # its file's stem: report.claims' entry, and its MLflow tags' key
    path: Path
    title: str
    link: str
    figures_from: str
    setting_from: str
    table: Table
    setting: Setting | None
    claims: tuple[Claim, ...]

    @property
    def heading(self) -> str:
        return f"Against {self.title}"

    @property
    def files_stem(self) -> str:
        """The stem of its section's files: claims.png/.csv for the study's, claims-<name>.png/.csv for another's."""
        return "claims" if self.name == STUDY_FILE else f"claims-{self.name}"

    @property
    def variants(self) -> tuple[str, ...]:
        """Its variants in order: its table's, then its claims' (a file without a table has its claims' only)."""
        return tuple(dict.fromkeys([*self.table, *(v for c in self.claims for p in c.parts for v in p.variants())]))

    @property
    def preset(self) -> str | None:
        return self.setting.preset if self.setting else None

    @property
    def model_axes(self) -> tuple[str, ...]:
        return self.setting.model_axes if self.setting else ()

    @property
    def code(self) -> tuple[str, ...]:
        return self.setting.code if self.setting else ()

    @property
    def scale_factor(self) -> float:
        return self.setting.scale_factor if self.setting else 2.0

    def trend_sizes(self) -> tuple[str, ...]:
        """Every model size a trend claim of it times, in order (none: it has no trend)."""
        return tuple(dict.fromkeys(s for c in self.claims for p in c.parts for s in p.sizes))


# --- finding, reading and checking a file -------------------------------------------------------------------


def claims_folders() -> list[Path]:
    """Where a claims file is looked for: the user's config folders first (as their norms), then conf/."""
    from src.core.paths import user_config_dirs

    return [*(d / CLAIMS_GROUP for d in user_config_dirs()), CONF_DIR / CLAIMS_GROUP]


def available(folders: list[Path] | None = None) -> list[str]:
    return sorted({p.stem for folder in folders or claims_folders() for p in folder.glob("*.yaml")})


def find(name: str, folders: list[Path] | None = None) -> Path:
    """The file of `name` (ConfigError naming report.claims and the files there are, when none)."""
    if isinstance(name, str) and name.endswith(".yaml"):  # a file named by its path (`python -m src.report`, outside Hydra)
        if Path(name).expanduser().is_file():
            return Path(name).expanduser()
        raise ConfigError(f"report.claims: no such file {name!r}")
    folders = folders or claims_folders()
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"report.claims: each entry is a claims file's name (conf/claims/<name>.yaml) or a path to one, got {name!r}")
    for folder in folders:
        if (path := folder / f"{name}.yaml").is_file():
            return path
    raise ConfigError(f"report.claims: no claims file {name!r}; valid choices: {', '.join(available(folders)) or 'none'} "
                      f"(conf/claims/, or claims/ in a --config-dir)")  # fmt: skip


def shown_path(path: Path) -> str:
    """The file as a user names it: relative to the working folder where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _error(path: Path, key: str, what: str) -> ConfigError:
    return ConfigError(f"{shown_path(path)}: {key}: {what}")


def parse(path: Path) -> ClaimsSchema:
    """The file merged onto the format: an unknown key or a wrong type is refused naming it."""
    from omegaconf import OmegaConf

    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as err:  # a YAML syntax error: its line, in one line
        raise _error(path, "(file)", " ".join(str(err).split())) from None
    if not isinstance(raw, dict):
        raise _error(path, "(file)", f"a mapping of {', '.join(f.name for f in fields(ClaimsSchema))}, got {type(raw).__name__}")
    return _typed(ClaimsSchema, raw, "", path)


def _typed(schema: type, raw: Any, key: str, path: Path) -> Any:
    """`raw` (a node of the file) as the dataclass `schema`, node by node so that a refusal names its
    full key (`claims[1].parts[0].size`): an unknown key with the node's keys, a wrong type with OmegaConf's words."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    valid = [f.name for f in fields(schema)]
    if not isinstance(raw, dict):
        raise _error(path, key or "(file)", f"a mapping of {', '.join(valid)}, got {raw!r}")
    for k in raw:
        if k not in valid:
            raise _error(path, f"{key}.{k}".lstrip("."), f"no such key ({key or 'the file'}'s keys: {', '.join(valid)}; docs/claims.md)")
    hints = get_type_hints(schema)
    nested = {}
    for f in fields(schema):
        kind, value = hints[f.name], raw.get(f.name)
        inner = _dataclass_in(kind)
        if value is None or inner is None:
            continue
        at = f"{key}.{f.name}".lstrip(".")
        if get_origin(kind) is list or (isinstance(value, list) and get_origin(kind) is not dict):
            if not isinstance(value, list):
                raise _error(path, at, f"a list, got {value!r}")
            nested[f.name] = [_typed(inner, v, f"{at}[{i}]", path) for i, v in enumerate(value)]
        elif get_origin(kind) is dict:
            if not isinstance(value, dict):
                raise _error(path, at, f"a mapping, got {value!r}")
            nested[f.name] = {str(k): _typed(inner, v, f"{at}.{k}", path) for k, v in value.items()}
        else:
            nested[f.name] = _typed(inner, value, at, path)
    flat = {k: v for k, v in raw.items() if k not in nested}
    try:
        node = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), flat))
    except OmegaConfBaseException as err:
        leaf = getattr(err, "full_key", "") or ""
        what = str(getattr(err, "msg", err)).splitlines()[0]
        raise _error(path, f"{key}.{leaf}".strip("."), what) from None
    for k, v in nested.items():
        setattr(node, k, v)
    return node


def _dataclass_in(kind: Any) -> type | None:
    """The dataclass a field holds (itself, in a list, as a mapping's values, or optional), else None."""
    if is_dataclass(kind):
        return kind  # type: ignore[return-value]
    for arg in get_args(kind):
        found = _dataclass_in(arg)
        if found is not None:
            return found
    return None


def _size(path: Path, key: str, part: PartSchema, metric: str) -> tuple[float, float] | None:
    """A part's size as (low, high), refused where no effect could have it."""
    if part.size is None:
        return None
    size = tuple(float(x) for x in part.size)
    if len(size) != 2 or not all(math.isfinite(x) for x in size):
        raise _error(path, f"{key}.size", f"two finite numbers [low, high], got {list(part.size)}")
    low, high = size
    if low > high:
        raise _error(path, f"{key}.size", f"low must be <= high, got [{low:g}, {high:g}]")
    if part.asserts == Kind.equivalence and not low < 0 < high:
        raise _error(path, f"{key}.size", f"an equivalence's band holds zero inside it, got [{low:g}, {high:g}]")
    if part.asserts in (Kind.difference, Kind.trend) and low < 0 < high:
        raise _error(path, f"{key}.size", f"a {part.asserts.value} is on one side of zero, got [{low:g}, {high:g}]")
    if metric == SPEED and low <= -1:
        raise _error(path, f"{key}.size", f"a training time cannot fall by 100% or more, got {low:g}")
    return low, high


def check(path: Path, s: ClaimsSchema, known: list[str], sizes: list[str]) -> ClaimsFile:
    """The checked file: every variant known (`known`), every model size a conf/model option (`sizes`),
    every size one an effect can have, a table row for each figure a part quotes without a size."""
    table = {k: Published(r.train_time_s, r.tokens_per_sec, r.test_loss, r.nan_from_step) for k, r in s.table.items()}
    for variant in table:
        if variant not in known:
            raise _error(path, f"table.{variant}", f"unknown variant; valid choices: {', '.join(known)}")
    setting = None
    if s.setting is not None:
        t = s.setting
        setting = Setting(t.device, t.devices, t.cuda, t.model, t.n_params, t.tokens, t.precision, t.seeds, t.preset,
                          tuple(t.model_axes), tuple(t.code), t.scale_factor)  # fmt: skip
    domains = {"any": Domain()}
    for name, d in s.domains.items():
        key = f"domains.{name}"
        if (d.params or d.tokens) and (setting is None or not setting.n_params):
            raise _error(path, key, "params/tokens hold a run against the setting's scale: the file needs setting.n_params")
        domains[name] = Domain(d.cuda, d.gpu, d.params, d.tokens, tuple(d.precision))
    if not s.claims:
        raise _error(path, "claims", "a claims file states at least one claim")
    claims = []
    for i, c in enumerate(s.claims):
        key, metric = f"claims[{i}]", c.metric.value
        if not c.statement.strip():
            raise _error(path, f"{key}.statement", "each claim says what it claims, in its source's words")
        if c.domain not in domains:
            raise _error(path, f"{key}.domain", f"unknown domain {c.domain!r}; valid choices: {', '.join(domains)}")
        if not c.parts:
            raise _error(path, f"{key}.parts", "a claim has at least one part")
        parts = [_part(path, f"{key}.parts[{j}]", p, metric, table, known, sizes) for j, p in enumerate(c.parts)]
        claims.append(Claim(i + 1, c.statement, metric, tuple(parts), domains[c.domain], c.words, c.note, c.open_question,
                            c.collapse_within))  # fmt: skip
    return ClaimsFile(path.stem, path, s.source.title, s.source.link, s.source.figures_from, s.source.setting_from, table,
                      setting, tuple(claims))  # fmt: skip


def _part(path: Path, key: str, p: PartSchema, metric: str, table: Table, known: list[str], sizes: list[str]) -> Part:
    kind = p.asserts.value
    if kind not in KINDS_OF[metric]:
        raise _error(path, f"{key}.asserts", f"{metric} is asserted as {' or '.join(KINDS_OF[metric])}, got {kind}")
    for name, value in (("b", p.b), ("a", p.a), *((f"minus[{i}]", v) for i, v in enumerate(p.minus or ()))):
        if value is not None and value not in known:
            raise _error(path, f"{key}.{name}", f"unknown variant {value!r}; valid choices: {', '.join(known)}")
    if not p.b:
        raise _error(path, f"{key}.b", "every part names the variant it speaks of")
    if kind in (DIFFERENCE, EQUIVALENCE) and (p.a is None or p.a == p.b):
        raise _error(path, f"{key}.a", f"a {kind} compares b with another variant a, got a={p.a!r}")
    if p.minus is not None and (len(p.minus) != 2 or metric != SPEED):
        raise _error(path, f"{key}.minus", "a contrast is two variants [a', b'] of training time")
    if kind == TREND:
        if not p.sizes or len(p.sizes) < 2:
            raise _error(path, f"{key}.sizes", f"a trend spans at least two model sizes; valid choices: {', '.join(sizes)}")
        for j, size in enumerate(p.sizes):
            if size not in sizes:
                raise _error(path, f"{key}.sizes[{j}]", f"unknown model size {size!r}; valid choices: {', '.join(sizes)}")
    elif p.sizes:
        raise _error(path, f"{key}.sizes", "only a trend spans model sizes")
    size = _size(path, key, p, metric)
    part = Part(p.a, p.b, kind, p.label, size, tuple(p.minus) if p.minus else None, tuple(p.sizes or ()), table)
    if kind in (DIFFERENCE, EQUIVALENCE) and size is None and math.isnan(part.published(metric)):
        raise _error(path, f"{key}.size", f"no size, and the file's table has no {metric} of {part.a} and {part.b} to take it from")
    if kind == EVENT and p.a is not None:
        raise _error(path, f"{key}.a", "an event is of b alone (whether its loss went NaN)")
    return part


def model_sizes() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))


@functools.cache
def _load(path: Path, known: tuple[str, ...]) -> ClaimsFile:
    return check(path, parse(path), list(known), model_sizes())


def load(name: str, known: list[str] | None = None, folders: list[Path] | None = None) -> ClaimsFile:
    """The claims file `name`, found (`find`) and checked against the `known` variants (default: the
    norms a run can have, the user's own included)."""
    if known is None:
        from src.core.norm_yamls import known_variants

        known = known_variants()
    return _load(find(name, folders), tuple(known))


def load_all(names: Any, known: list[str] | None = None) -> list[ClaimsFile]:
    """`report.claims`: the chosen files in order, each once (ConfigError for a bad entry or file)."""
    if names is None:
        names = [STUDY_FILE]
    if isinstance(names, str) or not list(names):
        raise ConfigError(f"report.claims: a list of claims files' names, e.g. [{STUDY_FILE}, my_claims], got {names!r}")
    return [load(n, known) for n in dict.fromkeys(names)]


def chosen(report_cfg: Any) -> list[ClaimsFile]:
    """The claims files the config's `report` group chooses (`report.claims`; absent: the study's)."""
    names = (report_cfg or {}).get("claims") if isinstance(report_cfg, dict) else None
    return load_all(list(names) if names is not None else None)
