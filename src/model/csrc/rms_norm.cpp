// RMSNorm forward and backward for contiguous fp32 rows on the CPU.
// Each row is read once per pass while it sits in L1 (768 floats = 3 KiB), the same access pattern
// as ATen's LayerNorm kernel, with less arithmetic: no mean, no shift.
// The ATen headers it uses and pybind11's tensor casters, not <torch/extension.h>: that one includes
// the whole C++ frontend (nn, optim, data), and the build took twice as long for it (docs/benchmarks.md).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <vector>

namespace {
constexpr int64_t kGrain = 16;  // rows per parallel task

void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.is_contiguous() && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              name, " must be a contiguous 2-D float32 CPU tensor");
}
}  // namespace

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). Returns {y, rstd}.
std::vector<at::Tensor> rms_norm_fwd(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_rows(x, "x");
  const int64_t rows = x.size(0), d = x.size(1);
  TORCH_CHECK(w.numel() == d && w.is_contiguous() && w.scalar_type() == at::kFloat, "weight must be float32 of size ", d);
  auto y = at::empty_like(x);
  auto rstd = at::empty({rows, 1}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  float* rp = rstd.data_ptr<float>();
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, rows, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* __restrict__ xr = xp + r * d;
      float* __restrict__ yr = yp + r * d;
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const float rs = 1.f / std::sqrt(ss / static_cast<float>(d) + feps);
      rp[r] = rs;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * rs * wp[i];
    }
  });
  return {y, rstd};
}

// dx = rstd * (dy*w - x * rstd^2 * mean(dy*w*x)),  dw = sum over rows of dy * x * rstd.
// dw is accumulated per thread (no atomics), then the few partial rows are summed.
std::vector<at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                     const at::Tensor& rstd) {
  check_rows(dy, "dy");
  check_rows(x, "x");
  const int64_t rows = x.size(0), d = x.size(1);
  auto dx = at::empty_like(x);
  const int64_t threads = at::get_num_threads();
  auto dw_partial = at::zeros({threads, d}, x.options());
  const float* dyp = dy.data_ptr<float>();
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* rp = rstd.data_ptr<float>();
  float* dxp = dx.data_ptr<float>();
  float* dwp = dw_partial.data_ptr<float>();
  at::parallel_for(0, rows, kGrain, [&](int64_t begin, int64_t end) {
    // __restrict__: the rows never alias, so the compiler may vectorise dx and dw in one loop.
    float* __restrict__ dw_row = dwp + at::get_thread_num() * d;
    const float* __restrict__ wr = wp;
    for (int64_t r = begin; r < end; ++r) {
      const float* __restrict__ dyr = dyp + r * d;
      const float* __restrict__ xr = xp + r * d;
      float* __restrict__ dxr = dxp + r * d;
      const float rs = rp[r];
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < d; ++i) s += dyr[i] * wr[i] * xr[i];
      const float c = s * rs * rs / static_cast<float>(d);
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) {
        dxr[i] = rs * (dyr[i] * wr[i] - xr[i] * c);
        dw_row[i] += dyr[i] * xr[i] * rs;
      }
    }
  });
  return {dx, dw_partial.sum(0)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm_fwd", &rms_norm_fwd, "RMSNorm forward (fp32 rows): returns y, rstd");
  m.def("rms_norm_bwd", &rms_norm_bwd, "RMSNorm backward (fp32 rows): returns dx, dw");
}
