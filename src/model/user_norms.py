"""A norm the user brings by config: any importable class or factory named by Hydra's `_target_`.

A norm YAML in the user's own config folder (`--config-dir ./my_conf`, or `hydra.searchpath`) names
it, beside its options and its `family`:

    _target_: my_norms.CenteredRMSNorm   # module on PYTHONPATH, or an installed package's
    family: rmsnorm
    scale_init: 1.0                      # an option: a keyword argument of the target

It takes the path every norm takes, the shipped ones named by `_target_` too (`src.model.norms.NormSpec`):
the model's width first, the run's
explicit eps by name where the signature takes one (a target without one is not given it: the run
records that, since a different eps is a different comparison), its options by name, per position
as for any norm. `width_arg` / `eps_arg` name those arguments for a signature that differs
(`eps_arg: null`: it takes none). `reference` names the built-in variant it is compared with; without
one nothing is recorded and the report chooses (src.report.judge.pairs.pairs_for: the first
swept built-in of its family, else torch_layernorm, else the first built-in). Its variant name is its
YAML's name.

`UserNorm` imports the target and reads its signature; `check_runs` builds it at the model's width
and runs it on a random batch under the run's precision (shape, dtype, finite output, a gradient
reaching its input), once per variant and process; its provenance (the file that defines it, or its
installed distribution, and that file's hash) is src.core.norm_source's.
Each refusal is a ValueError naming the `norm.` field and the fix; `src.training.run_spec` adds the YAML.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import get_object
from torch import nn

from src.core.schema import NORM_TARGET_KEY

TARGET_KEY = NORM_TARGET_KEY
WIDTH_ARG_KEY = "width_arg"  # the argument that takes the model's width; null: the first one
EPS_ARG_KEY = "eps_arg"  # the argument that takes eps; unset: `eps` where the signature has it; null: none
REFERENCE_KEY = "reference"  # the built-in variant it is compared with, when the user names one
CALL_KEYS = (
    TARGET_KEY,
    WIDTH_ARG_KEY,
    EPS_ARG_KEY,
    REFERENCE_KEY,
)  # YAML keys that are not the target's options
_UNSET = object()
# Variants whose runtime check already passed in this process or the process that launched it:
# a sweep checks each variant once, before launch, and its jobs (here or in a pool's workers) read this.
CHECKED_ENV = "NORMSWEEP_NORMS_CHECKED"
CHECK_BATCH = (2, 8)  # random batch x sequence of the runtime check (plus the width)
# What a Lightning precision runs the norm under: (parameter and input dtype, autocast dtype or None).
PRECISION_DTYPES = {
    "32-true": (torch.float32, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-true": (torch.bfloat16, None),
}


class NotANorm(ValueError):
    """The user's target does not behave as a norm of the model: the message names the key and the fix."""


def _import(target: str) -> Callable[..., Any]:
    """The object `target` names, found as Hydra finds a `_target_` (`hydra.utils.get_object`: `module.Name`,
    or a nested `module.Class.factory`); ValueError naming what failed and the fix."""
    if not isinstance(target, str) or "." not in target:
        raise ValueError(f"{TARGET_KEY}: {target!r} is not a dotted import path; write module.Name, e.g. my_norms.MyRMSNorm")
    hydra_log = logging.getLogger("hydra.utils")
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)  # get_object logs its failure; the refusal below is the one line
    try:
        found = get_object(target)
    except Exception as err:
        raise ValueError(_import_failure(target, err.__cause__ or err)) from None
    finally:
        hydra_log.setLevel(level)
    if not callable(found):
        raise ValueError(f"{TARGET_KEY}: {target} is a {type(found).__name__}, not a class or a function; name an nn.Module class or a factory of one")
    return found


def _import_failure(target: str, cause: BaseException) -> str:
    """What went wrong importing `target`, from the exception behind Hydra's ImportError."""
    missing = getattr(cause, "name", None) if isinstance(cause, ModuleNotFoundError) else None
    if missing and f"{target}.".startswith(f"{missing}."):  # a module of the target's own path
        parent, _, name = missing.rpartition(".")
        if not parent:
            return (
                f"{TARGET_KEY}: cannot import module {missing} ({cause}); put the folder that holds {missing} on PYTHONPATH "
                f"(PYTHONPATH=/path/to/folder python -m src.train ...), or pip install the package that provides it"
            )
        module = importlib.import_module(parent)  # imported already: only `name` was missing from it
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_"))
        return f"{TARGET_KEY}: {parent} ({getattr(module, '__file__', '?')}) has no {name}; its classes: {', '.join(names) or 'none'}"
    if missing:  # the user's module imports a module that is not there
        return (
            f"{TARGET_KEY}: importing {target.rpartition('.')[0]} failed: it imports {missing}, which cannot be found; "
            f"pip install the package that provides {missing.split('.')[0]}, or put the folder that holds it on PYTHONPATH"
        )
    if isinstance(cause, AttributeError):  # a nested name: the class is there, its attribute is not
        return f"{TARGET_KEY}: {target} cannot be found ({cause})"
    return f"{TARGET_KEY}: importing {target.rpartition('.')[0]} failed ({type(cause).__name__}: {cause}); fix the module"


def _parameters(factory: Callable[..., Any]) -> tuple[list[str], bool]:
    """(the names it takes, whether it takes **kwargs); ([], True) when Python cannot read its signature."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a C extension's class without a text signature
        return [], True
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


@dataclass(frozen=True)
class UserNorm:
    """A `_target_` imported, with the arguments its width and eps go to, checked against its signature."""

    target: str
    factory: Callable[..., Any]
    width_arg: str | None  # None: the width is its first positional argument
    eps_arg: str | None  # None: it takes no eps (the run records that)
    # The built-in its YAML names; "" when it names none. A default is not filled in here: recorded as if
    # named, it would override the report's choice by family (an rmsnorm paired with torch_layernorm).
    reference: str = ""

    @classmethod
    def of(cls, keys: Mapping[str, Any], option_names: list[str]) -> UserNorm:
        """From the YAML's call keys (`CALL_KEYS`); ValueError naming the field and the fix."""
        target = keys[TARGET_KEY]
        factory = _import(target)
        names, open_kwargs = _parameters(factory)
        _refuse_what_is_not_a_norm(target, factory, names, open_kwargs)
        width_arg = keys.get(WIDTH_ARG_KEY)
        if width_arg is not None and width_arg not in names and not open_kwargs:
            raise ValueError(
                f"{WIDTH_ARG_KEY}: {target} has no argument {width_arg!r} (its arguments: {', '.join(names) or 'none'})"
            )
        eps_arg = keys.get(EPS_ARG_KEY, _UNSET)
        if eps_arg is _UNSET:
            eps_arg = "eps" if "eps" in names else None
        elif eps_arg is not None and eps_arg not in names and not open_kwargs:
            raise ValueError(
                f"{EPS_ARG_KEY}: {target} has no argument {eps_arg!r} (its arguments: {', '.join(names) or 'none'}); "
                f"{EPS_ARG_KEY}: null if it takes no eps"
            )
        taken = {width_arg, eps_arg} | ({names[0]} if width_arg is None and names else set())
        accepted = [n for n in names if n not in taken]
        for name in option_names:
            if name not in accepted and not open_kwargs:
                raise ValueError(
                    f"{name}: not an argument of {target} (its options: {', '.join(accepted) or 'none'})"
                )
        return cls(str(target), factory, width_arg, eps_arg, str(keys.get(REFERENCE_KEY) or ""))

    def build(self, width: int, eps: float, options: Mapping[str, Any]) -> nn.Module:
        kwargs = dict(options)
        if self.eps_arg is not None:
            kwargs[self.eps_arg] = float(eps)
        if self.width_arg is not None:
            built = self.factory(**{self.width_arg: width}, **kwargs)
        else:
            built = self.factory(width, **kwargs)
        if not isinstance(built, nn.Module):
            raise NotANorm(
                f"{TARGET_KEY}: {self.target}({width}, ...) returned a {type(built).__name__}, not an nn.Module; "
                "name an nn.Module class, or a function that returns one"
            )
        return built


def _refuse_what_is_not_a_norm(target: str, factory: Callable[..., Any], names: list[str], open_kwargs: bool) -> None:
    """What its signature already says, before it is called: a class that is not an nn.Module, or a
    callable with no argument for the model's width (else building it would fail for another reason)."""
    if inspect.isclass(factory) and not issubclass(factory, nn.Module):
        raise ValueError(f"{TARGET_KEY}: {target} is a class but not an nn.Module: name a norm class (an nn.Module) or a function that returns one")
    if names or open_kwargs:
        return
    if inspect.isclass(factory):
        raise ValueError(
            f"{TARGET_KEY}: {target} takes no argument for the model's width ({target.rsplit('.', 1)[-1]}.__init__(self)): a norm "
            f"is built at the width, its first argument (or the one {WIDTH_ARG_KEY}: names)"
        )
    raise ValueError(
        f"{TARGET_KEY}: {target} takes no arguments, so it is not a norm class: name an nn.Module class that takes the model's "
        f"width (or a function that returns one)"
    )


# --- the check that it behaves as a norm of the model ------------------------------------------


def _checked_keys() -> set[str]:
    return set(filter(None, os.environ.get(CHECKED_ENV, "").split(",")))


def check_key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def check_runs(build: Callable[[], nn.Module], target: str, width: int, precision: str, key: str) -> None:
    """Build the norm at `width` and run a random batch through it, forward and backward, under
    `precision` (on the CPU: the launching process may have no accelerator). ValueError naming what
    went wrong and the fix. Once per `key` (what the run's fingerprints hold of it: the target and its
    source's hash or package, its options, eps, width, precision) in this
    process and in the processes it starts (`CHECKED_ENV`)."""
    if key in _checked_keys():
        return
    _check_runs(build, target, width, precision)
    os.environ[CHECKED_ENV] = ",".join(sorted(_checked_keys() | {key}))


def _check_runs(build: Callable[[], nn.Module], target: str, width: int, precision: str) -> None:
    dtype, autocast = PRECISION_DTYPES.get(precision, (torch.float32, None))
    with torch.random.fork_rng(devices=[]):  # the run's seeding stays its own
        torch.manual_seed(0)
        norm = build().to(dtype)
        x = torch.randn(*CHECK_BATCH, width, dtype=dtype, requires_grad=True)
        with torch.no_grad():
            y = norm(x)
        if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype:
            got = f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__
            raise NotANorm(
                f"{TARGET_KEY}: {target} maps a {tuple(x.shape)} {x.dtype} input to {got}; a norm of the model returns a "
                f"tensor of its input's shape and dtype (width {width}): normalize over the last dimension, cast back to x.dtype"
            )
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            y = norm(x)
        if not torch.isfinite(y).all():
            raise NotANorm(
                f"{TARGET_KEY}: {target} gives non-finite values on a random N(0, 1) batch at width {width} under precision "
                f"{precision}; check its eps and its arithmetic in that dtype"
            )
        y.float().square().sum().backward()
        if x.grad is None or not torch.isfinite(x.grad).all() or not x.grad.abs().sum() > 0:
            raise NotANorm(
                f"{TARGET_KEY}: {target}: no gradient reaches its input on a random batch at width {width} under precision "
                f"{precision} (the model could not learn through it); compute the output from x with differentiable torch ops, "
                "without .detach() or torch.no_grad()"
            )
