// RMSNorm forward and backward for CPU tensors, one pass over each row, fp32 accumulation.
//
// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), per row of the last dimension.
// Backward: dx = r * (g*w) - x * r^3 * mean(g*w*x);  dw = sum over rows of g * x * r.
// Rows are split across ATen's threads; each thread accumulates its own dw row, summed at the
// end, so the result does not depend on scheduling. Built by ablate.nn.fast_norms with
// torch.utils.cpp_extension.load_inline (-O3, vectorized reductions).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

namespace {

template <typename T>
void forward_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                  float* __restrict__ rstd, int64_t begin, int64_t end, int64_t d, float eps) {
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ xi = x + i * d;
    float ss = 0.f;
    for (int64_t j = 0; j < d; ++j) {
      const float v = static_cast<float>(xi[j]);
      ss += v * v;
    }
    const float r = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
    rstd[i] = r;
    T* __restrict__ yi = y + i * d;
    for (int64_t j = 0; j < d; ++j) {
      yi[j] = static_cast<T>(static_cast<float>(xi[j]) * r * static_cast<float>(w[j]));
    }
  }
}

template <typename T>
void backward_rows(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                   const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ dw,
                   int64_t begin, int64_t end, int64_t d) {
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ gi = g + i * d;
    const T* __restrict__ xi = x + i * d;
    const float r = rstd[i];
    float dot = 0.f;
    for (int64_t j = 0; j < d; ++j) {
      dot += static_cast<float>(gi[j]) * static_cast<float>(w[j]) * static_cast<float>(xi[j]);
    }
    const float c = dot * r * r * r / static_cast<float>(d);
    T* __restrict__ dxi = dx + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float gv = static_cast<float>(gi[j]);
      const float xv = static_cast<float>(xi[j]);
      dxi[j] = static_cast<T>(r * gv * static_cast<float>(w[j]) - xv * c);
      dw[j] += gv * xv * r;
    }
  }
}

int64_t chunks_for(int64_t n) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
}

}  // namespace

std::vector<at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w, double eps) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "rms_norm_forward: contiguous inputs");
  const int64_t d = x.size(-1);
  const int64_t n = x.numel() / d;
  auto y = at::empty_like(x);
  auto rstd = at::empty({n}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_fwd", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    float* rp = rstd.data_ptr<float>();
    at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
      forward_rows<scalar_t>(xp, wp, yp, rp, begin, end, d, static_cast<float>(eps));
    });
  });
  return {y, rstd};
}

std::vector<at::Tensor> rms_norm_backward(const at::Tensor& g, const at::Tensor& x,
                                          const at::Tensor& w, const at::Tensor& rstd) {
  TORCH_CHECK(g.is_contiguous() && x.is_contiguous(), "rms_norm_backward: contiguous inputs");
  const int64_t d = x.size(-1);
  const int64_t n = x.numel() / d;
  const int64_t chunks = chunks_for(n);
  auto dx = at::empty_like(x);
  auto partial = at::zeros({chunks, d}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_bwd", [&] {
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const float* rp = rstd.data_ptr<float>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    float* pp = partial.data_ptr<float>();
    const int64_t per = (n + chunks - 1) / chunks;
    at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const int64_t begin = c * per;
        const int64_t end = std::min(n, begin + per);
        backward_rows<scalar_t>(gp, xp, wp, rp, dxp, pp + c * d, begin, end, d);
      }
    });
  });
  return {dx, partial.sum(0).to(w.scalar_type())};
}
