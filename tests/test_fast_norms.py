"""fast_rmsnorm against nn.RMSNorm: values and gradients (input and weight), dtypes, factory, eps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from src.model.cpu_kernels import rms_norm_extension
from src.model.fast_norms import FastRMSNorm, dw_chunk, rms_norm_backward, rms_norm_forward
from src.model.norms import make_norm

EPS = 1e-5
# bf16 keeps 8 bits of mantissa: one rounding of the output is ~0.4% relative; inputs and
# gradients rounded to bf16 on both sides compound that to about 2e-2 absolute at unit scale.
BF16_TOL = {"atol": 3e-2, "rtol": 3e-2}


def pair(dim: int, eps: float = EPS, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, nn.Module]:
    """A FastRMSNorm and an nn.RMSNorm with the same random (non-trivial) weight."""
    torch.manual_seed(0)
    ref = nn.RMSNorm(dim, eps=eps)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(dim) * 0.5 + 1)
    fast = make_norm("fast_rmsnorm", dim, eps)
    fast.load_state_dict(ref.state_dict())
    return fast.to(dtype), ref.to(dtype)


def forward_backward(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = module(x)
    y.backward(dy)
    return y.detach(), x.grad, module.weight.grad


# 2-D and 3-D; row counts that give dw chunks of 8, 2 and 1 (odd widths too).
@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
@pytest.mark.parametrize("shape", [(32, 64), (2, 5, 48), (7, 33)])
def test_matches_nn_rmsnorm_fp32(shape: tuple[int, ...]) -> None:
    fast, ref = pair(shape[-1])
    x, dy = torch.randn(shape) * 3, torch.randn(shape)
    for got, want in zip(forward_backward(fast, x, dy), forward_backward(ref, x, dy), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_eager_kernels_match_autograd() -> None:
    # The functions the compiled path is built from, run eagerly (the fallback without a compiler).
    torch.manual_seed(1)
    x, dy, w = (
        torch.randn(24, 40, requires_grad=True),
        torch.randn(24, 40),
        torch.randn(40, requires_grad=True),
    )
    y_ref = nn.functional.rms_norm(x, (40,), w, EPS)
    y_ref.backward(dy)
    y, ssq = rms_norm_forward(x.detach(), w.detach(), EPS)
    for chunk in (1, dw_chunk(24)):
        dx, dw = rms_norm_backward(dy, x.detach(), w.detach(), ssq, EPS, chunk)
        torch.testing.assert_close(dx, x.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dw, w.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, y_ref.detach(), atol=1e-5, rtol=1e-5)


def test_dw_chunk_divides_rows() -> None:
    assert [dw_chunk(n) for n in (4096, 24, 12, 10, 7)] == [8, 8, 4, 2, 1]


@pytest.mark.slow  # compiles kernels with inductor (a C++ compiler run per shape)
def test_bf16_inputs_and_weights() -> None:
    fast, ref = pair(64, dtype=torch.bfloat16)
    _, ref32 = pair(64)
    x, dy = torch.randn(4, 8, 64).bfloat16(), torch.randn(4, 8, 64).bfloat16()
    got = forward_backward(fast, x, dy)
    assert [t.dtype for t in got] == [torch.bfloat16] * 3
    # Against the fp32 reference on the same (bf16-rounded) inputs, and against nn.RMSNorm in bf16.
    for g, want32, want16 in zip(
        got, forward_backward(ref32, x.float(), dy.float()), forward_backward(ref, x, dy), strict=True
    ):
        torch.testing.assert_close(g.float(), want32, **BF16_TOL)
        torch.testing.assert_close(g.float(), want16.float(), **BF16_TOL)


@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
def test_under_bf16_autocast() -> None:
    fast, ref = pair(32)
    x, dy = torch.randn(16, 32), torch.randn(16, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = forward_backward(fast, x, dy)
        want = forward_backward(ref, x, dy)
    assert got[0].dtype == want[0].dtype  # same output dtype as nn.RMSNorm under autocast
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w.float(), **BF16_TOL)


@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
def test_expanded_gradient() -> None:
    # y.sum().backward() hands the backward a stride-0 gradient.
    fast, ref = pair(16)
    x = torch.randn(8, 16)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    fast(xs[0]).sum().backward()
    ref(xs[1]).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.weight.grad, ref.weight.grad, atol=1e-5, rtol=1e-5)


def test_factory_key_and_state_dict() -> None:
    norm = make_norm("fast_rmsnorm", 48, 1e-6)
    assert isinstance(norm, FastRMSNorm) and isinstance(norm, nn.RMSNorm)
    assert norm.eps == 1e-6
    assert torch.equal(norm.weight, torch.ones(48)) and norm.weight.requires_grad
    # Interchangeable with torch_rmsnorm checkpoints: same keys and shapes.
    other = make_norm("torch_rmsnorm", 48, 1e-6)
    assert norm.state_dict().keys() == other.state_dict().keys()
    other.load_state_dict(norm.state_dict())


@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
@pytest.mark.parametrize("eps", [1e-5, 1e-1])
def test_eps_is_honoured(eps: float) -> None:
    # With tiny activations eps dominates mean(x^2): the output must follow the given eps.
    x = torch.full((2, 8), 1e-3)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    torch.testing.assert_close(make_norm("fast_rmsnorm", 8, eps)(x), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
def test_native_cpu_kernel_builds_and_matches() -> None:
    # CI and the developer machines have gcc and ninja: the fp32 path must be the native kernel.
    native = rms_norm_extension()
    assert native is not None
    torch.manual_seed(2)
    # Rows not a multiple of the kernel's parallel grain (16); width not a multiple of the vector width.
    x = torch.randn(37, 771, requires_grad=True)
    w = (torch.randn(771) * 0.5 + 1).requires_grad_(True)
    dy = torch.randn(37, 771)
    nn.functional.rms_norm(x, (771,), w, EPS).backward(dy)
    y, rstd = native.rms_norm_fwd(x.detach(), w.detach(), EPS)
    dx, dw = native.rms_norm_bwd(dy, x.detach(), w.detach(), rstd)
    torch.testing.assert_close(y, nn.functional.rms_norm(x.detach(), (771,), w.detach(), EPS), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dx, x.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dw, w.grad, atol=1e-4, rtol=1e-5)
    with pytest.raises(RuntimeError, match="float32"):
        native.rms_norm_fwd(x.detach().double(), w.detach(), EPS)


@pytest.mark.slow  # builds (or loads) the native C++ kernel: ~30 s on two cores, once per environment
def test_fp32_module_uses_the_native_kernel() -> None:
    fast = make_norm("fast_rmsnorm", 16, EPS)
    y = fast(torch.randn(4, 16, requires_grad=True))
    # The autograd node is the Function's ctx: it records which kernels the forward ran.
    assert y.grad_fn.native is rms_norm_extension() is not None
    y_bf16 = make_norm("fast_rmsnorm", 16, EPS).to(torch.bfloat16)(torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True))
    assert y_bf16.grad_fn.native is None  # other dtypes take the compiled path


def test_the_native_build_is_keyed_by_the_source_and_the_environment_not_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two checkouts of one source share one build (a worktree on the same environment loads the
    library the first built, instead of compiling again); a changed source gets its own, and so does
    another environment's torch: a clone's own .venv beside this one rebuilt the shared folder on every
    switch between them (the command names each one's torch headers)."""
    from src.model.cpu_kernels import CSRC, build_folder

    text = (CSRC / "rms_norm.cpp").read_bytes()
    a, b, changed = tmp_path / "a" / "rms_norm.cpp", tmp_path / "b" / "rms_norm.cpp", tmp_path / "c" / "rms_norm.cpp"
    for path, data in ((a, text), (b, text), (changed, text + b"\n// changed\n")):
        path.parent.mkdir()
        path.write_bytes(data)
    assert build_folder(a) == build_folder(b) == build_folder(CSRC / "rms_norm.cpp")
    assert build_folder(changed) != build_folder(a)
    here = build_folder(a)
    other_env = tmp_path / "other" / ".venv" / "lib" / "python3.11" / "site-packages" / "torch"
    other_env.mkdir(parents=True)
    monkeypatch.setattr(torch, "__file__", str(other_env / "__init__.py"))
    assert build_folder(a) != here and build_folder(a).name == here.name  # the same source, another environment's folder
