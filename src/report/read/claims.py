"""A claims file, as data: one declaration of its format, validated in one place.

A claims file (`conf/claims/<name>.yaml`, or `claims/<name>.yaml` in a config folder of the user's on
Hydra's search path, as their norms are) states hypotheses before a sweep tests them; the report's
claims sections (src.report.judge.study) judge every chosen file (`report.claims`) by one rule.

The classes below are both the format and the data the judging code reads: frozen pydantic models
whose validators refuse what a type cannot say, each refusal one ConfigError line naming the file and
the key's full path, raised before anything trains (src.launch.callbacks.check_reference). The
format, field by field, and what it refuses: docs/claims.md (tests/test_claims_file.py holds its
table against these fields).

Light on purpose: a sweep reads its claims files before its first job, so this module imports none of
pandas, scipy, matplotlib, MLflow or torch (tests/test_architecture.py checks it).
"""

from __future__ import annotations

import functools
import math
import operator
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from src.core.norm_yamls import known_variants
from src.core.paths import CONF_DIR, ConfigError, user_config_dirs
from src.report.kinds import KINDS
from src.report.kinds.base import At, ClaimKind, check_sizes
from src.report.kinds.metrics import LOSS, SAVING, SHARE, SIZED, SPEED, STABILITY, Metric

CLAIMS_GROUP = "claims"  # conf/claims/<name>.yaml, and <config-dir>/claims/<name>.yaml of the user's
STUDY_FILE = "rmsnorm_study"  # the study this project reproduces: report.claims' default
MAX_CLAIMS = 200  # claims in one file: a file is a study's hypotheses, read in one section (docs/claims.md)
DOCS = "docs/claims.md"


# A part's `asserts`: the kinds' names (src.report.kinds, one module each), as an enum the format refuses others by.
Kind = StrEnum("Kind", {name: name for name in KINDS})
DIFFERENCE, EQUIVALENCE, EVENT, TREND, NO_WORSE = (Kind[k] for k in ("difference", "equivalence", "event", "trend", "no_worse"))
# The kinds each metric can be asserted with: a loss never diverges by a size, a trend is of a share.
KINDS_OF = {SPEED: (DIFFERENCE, EQUIVALENCE, NO_WORSE), LOSS: (DIFFERENCE, EQUIVALENCE, NO_WORSE), STABILITY: (EVENT,),
            SHARE: (TREND,), SAVING: (TREND, DIFFERENCE)}  # fmt: skip
HALF_PRECISION = ("fp16_mixed", "bf16_mixed")  # 16-bit autocast: a norm's kernels move 2 bytes a value either way
FP16 = ("fp16_mixed",)  # fp16's narrow exponent range: bf16 keeps fp32's


class Node(BaseModel, frozen=True, extra="forbid"):
    """A node of the format: frozen, no unknown key; equal by its fields (the private links a file
    sets after validation — a part's table, a claim's number — are not part of what it is)."""

    @model_validator(mode="before")
    @classmethod
    def _seen(cls, data: Any, info: ValidationInfo) -> Any:
        """Which node a mapping of the file is read as, kept in the validation's context: a refused
        key's node and the keys it has (`_refusal`), which pydantic's error, naming its path alone,
        leaves out."""
        if info.context is not None:
            info.context.setdefault("nodes", {})[id(data)] = cls
        return data

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__  # type: ignore[union-attr]


# --- the format ------------------------------------------------------------------------------------------


class Source(Node):
    title: str = ""  # the section is "Against <title>" (no title: "Against the claims of <name>.yaml")
    link: str = ""
    figures_from: str = ""  # where its table's figures come from
    setting_from: str = ""  # where its setting comes from


class Published(Node):
    """One row of a source's table (NaN where it has no number)."""

    train_time_s: float = math.nan
    tokens_per_sec: float = math.nan
    test_loss: float = math.nan
    nan_from_step: int | None = None  # the step by which the loss was NaN (the study's no-norm run)


Table = dict[str, Published]


class Setting(Node):
    """Where a source's table was made: the few facts that decide how far a comparison carries."""

    device: str
    devices: int = 1
    cuda: bool = False
    model: str
    n_params: int
    tokens: int
    precision: str
    seeds: int = 1
    preset: str | None = None  # conf/experiment/<preset>.yaml: its run configuration, line by line
    model_axes: tuple[str, ...] = ()  # model keys it fixed: a run off them is another model
    code: tuple[str, ...] = ()  # what its code does that a config can change
    scale_factor: float = Field(2.0, gt=1)  # a model within this factor of its parameters counts as its scale


class Domain(Node):
    """The setting in which a claim's figure can be expected; outside it a claim is *not applicable
    here* (the sweep's own figure is still shown)."""

    cuda: bool = False  # timed or computed by CUDA kernels
    gpu: str = ""  # the GPU the source timed, as a run's device name spells it ("" any)
    params: bool = False  # the model within the setting's scale factor of its parameters
    tokens: bool = False  # at least its tokens per parameter / scale factor
    precision: tuple[str, ...] = ()  # the precisions the figure holds in (() any)

    @field_validator("precision")
    @classmethod
    def _precisions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        valid = sorted(p.stem for p in (CONF_DIR / "precision").glob("*.yaml"))
        for i, p in enumerate(value):
            if p not in valid:
                raise At(f"[{i}]", f"unknown precision {p!r}; valid choices: {', '.join(valid)}")
        return value


ANY = "any"  # the domain every claim may name: every setting


class Part(Node):
    """One effect a claim speaks of: b against a (or, with `minus`, that effect less another pair's; or
    for a trend b's share of a step over `sizes`), what it asserts of it and the size its words give
    (signed, low <= high; for an equivalence the band around zero). The band a sweep is read against is
    that size joined with the source's own figure for this part (`band`); without a size, the figure alone."""

    b: str
    a: str | None = None  # None: a claim about b alone (no_norm's divergence, a norm's share)
    asserts: Kind
    label: str = ""
    size: tuple[float, float] | None = None
    minus: tuple[str, str] | None = None  # (a', b'): the effect is (b vs a) - (b' vs a')
    sizes: tuple[str, ...] = ()  # a trend: the model sizes, smallest first
    margin: float | None = None  # no_worse: how much worse b may be (higher time or loss), and still be no worse
    _file: ClaimsFile | None = None  # set by the file that read it

    @property
    def table(self) -> Table:
        return self._file.table if self._file else {}

    @property
    def noun(self) -> str:
        """Who stated its figure, as its section names them (`ClaimsFile.source_noun`)."""
        return self._file.source_noun if self._file else "the claim"

    @property
    def contrast_pairs(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """A contrast's (`minus`) two pairs (a, b), the effect of the first less the second's."""
        return (str(self.a), self.b), self.minus or ("", "")

    @property
    def contrast_names(self) -> tuple[str, str]:
        """A contrast's two pairs, as its sentences and its figure's row name them: the study's one
        contrast is of its built-in and hand-rolled norms; any other file's, of its own pairs."""
        if self._file is not None and self._file.is_study:  # asked of the file, not read off its noun
            return "the built-ins'", "the hand-rolled"
        first, second = (f"{b} vs {a}" for a, b in self.contrast_pairs)
        return first, second

    @field_validator("size")
    @classmethod
    def _size(cls, size: tuple[float, float] | None) -> tuple[float, float] | None:
        if size is None:
            return None
        if not all(math.isfinite(x) for x in size):
            raise ValueError(f"two finite numbers [low, high], got {list(size)}")
        if size[0] > size[1]:
            raise ValueError(f"low must be <= high, got [{size[0]:g}, {size[1]:g}]")
        return size

    def published(self, metric: str) -> float:
        """The source's figure for this part: b / a - 1 of training time, b - a of test loss, or the
        step b's loss went NaN (NaN where its table has none)."""
        if metric == STABILITY:
            row = self.table.get(self.b)
            return float(row.nan_from_step) if row is not None and row.nan_from_step is not None else math.nan
        if self.a is None or metric in SIZED:
            return math.nan
        value = table_effect(self.table, metric, self.a, self.b)
        return value - table_effect(self.table, metric, *self.minus) if self.minus else value

    @property
    def kind(self) -> ClaimKind:
        """What it asserts, as the module that owns that kind (src.report.kinds)."""
        return KINDS[self.asserts]

    def band(self, metric: str) -> tuple[float, float]:
        """The claimed band, by its kind: a size joined with its figure, a side, a margin's region."""
        return self.kind.band(self, metric)

    def variants(self) -> tuple[str, ...]:
        return tuple(v for v in (self.a, self.b, *(self.minus or ())) if v is not None)

    def check(self, metric: str, known: list[str], sizes: dict[str, float]) -> None:
        """What a type cannot say of a part, given its claim's metric (At naming the key); then what its kind needs."""
        if self.asserts not in KINDS_OF[metric]:
            raise At("asserts", f"{metric} is asserted as {' or '.join(KINDS_OF[metric])}, got {self.asserts.value}")
        for name, value in (("b", self.b), ("a", self.a), *((f"minus[{i}]", v) for i, v in enumerate(self.minus or ()))):
            if value is not None and value not in known:
                raise At(name, f"unknown variant {value!r}; valid choices: {', '.join(known)}")
        if metric == SAVING and (self.a is None or self.a == self.b):
            raise At("a", f"a saving is b's against another variant a, got a={self.a!r}")
        if self.minus is not None and metric != SPEED:
            raise At("minus", f"a contrast [a', b'] is of train_time_s, not {metric}")
        if metric == SAVING and not self.kind.over_sizes:  # a saving's size, read at the last of its sizes: a trend's order
            check_sizes(self, sizes, fewest=1)
        elif self.sizes and not self.kind.over_sizes:
            raise At("sizes", "only a trend, or a saving, spans model sizes")
        self.kind.check(self, metric, sizes)


class Claim(Node):
    statement: str  # as its source put it
    metric: Metric  # what it measures
    parts: tuple[Part, ...] = Field(min_length=1)
    domain_name: str = Field(ANY, alias="domain")  # a name in the file's `domains`, or `any`
    words: str = ""  # how the size was read from its words
    note: str = ""  # what its source itself said of it
    open_question: bool = False  # the seed-spread question of a single-seed loss gap is asked after it
    collapse_within: int | None = Field(None, gt=0)  # an event: the steps its source says a collapse typically takes
    _number: int = 0
    _domain: Domain = Domain()

    @property
    def number(self) -> int:
        """Its place in its file, from 1."""
        return self._number

    @property
    def domain(self) -> Domain:
        """The domain its `domain` names, resolved in its file."""
        return self._domain

    @field_validator("statement")
    @classmethod
    def _said(cls, statement: str) -> str:
        if not statement.strip():
            raise ValueError("each claim says what it claims, in its source's words")
        return statement

    @model_validator(mode="after")
    def _parts(self, info: ValidationInfo) -> Claim:
        context = info.context or {}
        for j, part in enumerate(self.parts):
            try:
                part.check(self.metric.value, context.get("known", []), context.get("sizes", {}))
            except At as err:
                raise At(f"parts[{j}].{err.key}", err.what) from None
        if self.open_question and self.metric != Metric.test_loss:
            raise At("open_question", f"the seed-spread question is asked of a test_loss claim, not {self.metric.value}")
        if self.collapse_within is not None and self.metric != Metric.divergence:
            raise At("collapse_within", f"the steps a collapse takes are said of a divergence claim, not {self.metric.value}")
        return self

    def variants(self) -> set[str]:
        return {v for p in self.parts for v in p.variants()}

    def same_as(self, other: Claim) -> bool:
        """The same hypothesis twice: one statement, or one metric of the same parts."""
        return self.statement.strip().lower() == other.statement.strip().lower() or (
            self.metric == other.metric and set(self.parts) == set(other.parts))  # fmt: skip


class ClaimsFile(Node):
    """One claims file, loaded and checked."""

    source: Source = Field(default_factory=Source)
    table: Table = Field(default_factory=dict)  # a variant -> its published row
    setting: Setting | None = None
    domains: dict[str, Domain] = Field(default_factory=dict)
    claims: tuple[Claim, ...] = Field(min_length=1)
    _path: Path = Path()  # set by the reader (`parse`)

    @model_validator(mode="after")
    def _whole(self, info: ValidationInfo) -> ClaimsFile:
        known = (info.context or {}).get("known", [])
        for variant in self.table:
            if variant not in known:
                raise At(f"table.{variant}", f"unknown variant; valid choices: {', '.join(known)}")
        for name, d in self.domains.items():
            if name == ANY:
                raise At(f"domains.{name}", f"{ANY!r} is every setting, always there; name yours otherwise")
            if (d.params or d.tokens) and (self.setting is None or not self.setting.n_params):
                raise At(f"domains.{name}", "params/tokens hold a run against the setting's scale: the file needs setting.n_params")
        if len(self.claims) > MAX_CLAIMS:
            raise At("claims", f"at most {MAX_CLAIMS} claims in a file, got {len(self.claims):,}: split it ({DOCS})")
        domains = {ANY: Domain(), **self.domains}
        for i, claim in enumerate(self.claims):
            if claim.domain_name not in domains:
                raise At(f"claims[{i}].domain", f"unknown domain {claim.domain_name!r}; valid choices: {', '.join(domains)}")
            same = next((j for j in range(i) if claim.same_as(self.claims[j])), None)
            if same is not None:
                raise At(f"claims[{i}]", f"the same claim as claims[{same}] (one statement, or one metric of the same parts)")
            claim._number, claim._domain = i + 1, domains[claim.domain_name]
            for j, part in enumerate(claim.parts):
                part._file = self
                try:
                    part.kind.check_figure(part, claim.metric)
                except At as err:
                    raise At(f"claims[{i}].parts[{j}].{err.key}", err.what) from None
                if part.kind.banded and math.isnan(part.band(claim.metric)[0]):
                    raise At(f"claims[{i}].parts[{j}].size", f"no size, and the file's table has no {claim.metric.value} of "
                             f"{part.a} and {part.b} to take it from")  # fmt: skip
        return self

    @property
    def name(self) -> str:
        """Its file's stem: report.claims' entry, and its MLflow tags' key."""
        return self._path.stem

    @property
    def path(self) -> Path:
        return self._path

    @property
    def is_study(self) -> bool:
        """The published study this project reproduces (the one file whose words say "the study")."""
        return self.name == STUDY_FILE and self.path.resolve() == (CONF_DIR / CLAIMS_GROUP / f"{STUDY_FILE}.yaml").resolve()

    @property
    def source_noun(self) -> str:
        """Who stated its figures, as its section names them: the study, a source with a published
        table, or the claim itself (a file of hypotheses with no table)."""
        return "the study" if self.is_study else "the source" if self.table else "the claim"

    @property
    def called(self) -> str:
        """What its section calls it: its source's title, else its file's name."""
        return self.source.title or f"{self.name}.yaml"

    @property
    def heading(self) -> str:
        return f"Against {self.source.title or f'the claims of {self.name}.yaml'}"

    @property
    def files_stem(self) -> str:
        """The stem of its section's files: claims.png/.csv for the study's, claims-<name>.png/.csv for another's."""
        return "claims" if self.name == STUDY_FILE else f"claims-{self.name}"

    @property
    def variants(self) -> tuple[str, ...]:
        """Its variants in order: its table's, then its claims' (a file without a table has its claims' only)."""
        return tuple(dict.fromkeys([*self.table, *(v for c in self.claims for p in c.parts for v in p.variants())]))

    def trend_sizes(self) -> tuple[str, ...]:
        """Every model size a trend claim of it times, in order (none: it has no trend)."""
        return tuple(dict.fromkeys(s for c in self.claims for p in c.parts for s in p.sizes))


def table_effect(table: Table, metric: str, a: str, b: str) -> float:
    """b against a in a source's table: b / a - 1 of training time, b - a of test loss (NaN: no row)."""
    if a not in table or b not in table:
        return math.nan
    if metric == SPEED:
        return table[b].train_time_s / table[a].train_time_s - 1
    return table[b].test_loss - table[a].test_loss


# --- finding, reading and checking a file -------------------------------------------------------------------


def claims_folders() -> list[Path]:
    """Where a claims file is looked for: the user's config folders first (as their norms), then conf/."""
    return [*(d / CLAIMS_GROUP for d in user_config_dirs()), CONF_DIR / CLAIMS_GROUP]


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
    valid = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
    raise ConfigError(f"report.claims: no claims file {name!r}; valid choices: {', '.join(valid) or 'none'} "
                      f"(conf/claims/, or claims/ in a --config-dir)")  # fmt: skip


def shown_path(path: Path) -> str:
    """The file as a user names it: relative to the working folder where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _error(path: Path, key: str, what: str) -> ConfigError:
    return ConfigError(f"{shown_path(path)}: {key or '(file)'}: {what}")


def _key(loc: tuple[str | int, ...]) -> str:
    """A pydantic location as the file's key path: ('claims', 1, 'parts', 0, 'size') -> claims[1].parts[0].size."""
    return "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")


def _keys(model: type[Node]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _refusal(path: Path, err: ValidationError, raw: Any, nodes: dict[int, type[Node]]) -> ConfigError:
    """The first thing pydantic refused, in one line naming the key (extra keys, missing fields and
    choices in the format's words; a validator's own words as it wrote them)."""
    # A misspelt key explains the required one it leaves missing: said first; then the deepest (a part
    # refused empties its list, which is the consequence, not the cause).
    e = min(err.errors(include_url=False), key=lambda x: (x["type"] != "extra_forbidden", -len(x["loc"])))
    loc, kind, got = tuple(e["loc"]), e["type"], e.get("input")
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, At):  # a validator naming a key below its node
        return _error(path, ".".join(k for k in (_key(loc), cause.key) if k).replace(".[", "["), cause.what)
    if kind == "extra_forbidden":
        parent = nodes.get(id(functools.reduce(operator.getitem, loc[:-1], raw)))  # the mapping it is in
        valid = f"; {_key(loc[:-1]) or 'the file'}'s keys: {', '.join(_keys(parent))}" if parent else ""
        return _error(path, _key(loc), f"no such key{valid} ({DOCS})")
    if kind == "missing":
        return _error(path, _key(loc), f"required ({DOCS})")
    if kind == "enum":
        return _error(path, _key(loc), f"valid choices: {e['ctx']['expected'].replace(chr(39), '')}; got {got!r}")
    what = e["msg"].removeprefix("Value error, ")
    return _error(path, _key(loc), what if kind == "value_error" else f"{what[:1].lower()}{what[1:]}, got {got!r}")


def parse(path: Path, known: list[str], sizes: dict[str, float]) -> ClaimsFile:
    """The file validated against the format: `known` variants, model `sizes` (name -> parameters)."""
    import yaml

    try:  # safe: no tags that build objects
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:  # a syntax error: its line, in one line
        raise _error(path, "", " ".join(str(err).split())) from None
    if not isinstance(raw, dict):
        raise _error(path, "", f"a mapping of {', '.join(_keys(ClaimsFile))}, got {type(raw).__name__}")
    context: dict[str, Any] = {"known": known, "sizes": sizes}
    try:
        found = ClaimsFile.model_validate(raw, context=context)
    except ValidationError as err:
        raise _refusal(path, err, raw, context.get("nodes", {})) from None
    found._path = path
    return found


def model_sizes() -> dict[str, float]:
    """Each conf/model option and its parameter count, smallest first (a trend's sizes are in this order)."""
    import yaml

    def params(m: dict[str, Any]) -> float:
        d, layers, vocab, n = (float(m[k]) for k in ("emb_dim", "n_layers", "vocab_size", "context_length"))
        return 2 * vocab * d + n * d + layers * 12 * d * d

    found = {p.stem: params(yaml.safe_load(p.read_text())) for p in (CONF_DIR / "model").glob("*.yaml")}
    return dict(sorted(found.items(), key=lambda kv: kv[1]))


@functools.cache
def _load(path: Path, known: tuple[str, ...]) -> ClaimsFile:
    return parse(path, list(known), model_sizes())


def load(name: str, known: list[str] | None = None, folders: list[Path] | None = None) -> ClaimsFile:
    """The claims file `name`, found (`find`) and checked against the `known` variants (default: the
    norms a run can have, the user's own included)."""
    return _load(find(name, folders), tuple(known_variants() if known is None else known))


def load_all(names: Any, known: list[str] | None = None) -> list[ClaimsFile]:
    """`report.claims`: the chosen files in order, each once (ConfigError for a bad entry or file, or
    two files of one name: their sections, files and MLflow tags are keyed by it)."""
    names = [STUDY_FILE] if names is None else names
    if isinstance(names, str) or not list(names):
        raise ConfigError(f"report.claims: a list of claims files' names, e.g. [{STUDY_FILE}, my_claims], got {names!r}")
    files = [load(n, known) for n in dict.fromkeys(names)]
    by_name: dict[str, ClaimsFile] = {}
    for f in files:
        if f.name in by_name and by_name[f.name].path.resolve() != f.path.resolve():
            raise ConfigError(f"report.claims: two files named {f.name}.yaml ({shown_path(by_name[f.name].path)}, "
                              f"{shown_path(f.path)}): a file's name keys its section, files and tags; rename one")  # fmt: skip
        by_name[f.name] = f
    return list(by_name.values())


def chosen(report_cfg: Any) -> list[ClaimsFile]:
    """The claims files the config's `report` group chooses (`report.claims`; absent: the study's)."""
    names = report_cfg.get("claims") if isinstance(report_cfg, dict) else None
    return load_all(names)  # a string (`report.claims=my_claims`) is refused there, not read letter by letter

