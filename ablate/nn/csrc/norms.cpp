// RMSNorm and LayerNorm for CPU tensors with their backwards, autograd included: ATen's threads
// over the row arithmetic of rms_norm_rows.h and layer_norm_rows.h (fp32 accumulation; the same
// bits whatever the build target or thread count). rms_norm() and layer_norm() are one C++ call
// forward and one backward, so a call on a few rows (decoding) costs no more than F.layer_norm's. Built by ablate.nn.fast_norms with
// torch.utils.cpp_extension. It includes only the headers it uses, not <torch/extension.h>
// (the whole C++ frontend): the build takes about 25 s instead of 40 s on 2 cores.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#include <optional>
#include <vector>

#include "layer_norm_rows.h"
#include "rms_norm_rows.h"

namespace {

template <typename T>
float to_float(T v) { return static_cast<float>(v); }

template <typename T>
struct FromFloat {
  T operator()(float v) const { return static_cast<T>(v); }
};

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
      ablate_rms::forward_rows(xp, wp, yp, rp, begin, end, d, static_cast<float>(eps),
                               to_float<scalar_t>, FromFloat<scalar_t>());
    });
  });
  return {y, rstd};
}

std::vector<at::Tensor> rms_norm_backward(const at::Tensor& g, const at::Tensor& x,
                                          const at::Tensor& w, const at::Tensor& rstd) {
  TORCH_CHECK(g.is_contiguous() && x.is_contiguous(), "rms_norm_backward: contiguous inputs");
  const int64_t d = x.size(-1);
  const int64_t n = x.numel() / d;
  const int64_t blocks = ablate_rms::blocks_for(n);
  auto dx = at::empty_like(x);
  auto partial = at::empty({blocks, d}, x.options().dtype(at::kFloat));
  auto dw = at::empty({d}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_bwd", [&] {
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const float* rp = rstd.data_ptr<float>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    float* pp = partial.data_ptr<float>();
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        ablate_rms::backward_block(gp, xp, wp, rp, dxp, pp + b * d, b, n, d,
                                   to_float<scalar_t>, FromFloat<scalar_t>());
      }
    });
  });
  const float* pp = partial.data_ptr<float>();
  float* dwp = dw.data_ptr<float>();
  at::parallel_for(0, d, 256, [&](int64_t begin, int64_t end) {
    ablate_rms::sum_blocks(pp, dwp, blocks, d, begin, end);
  });
  return {dx, dw.to(w.scalar_type())};
}

namespace {

// y = rms_norm(x, w, eps) as one autograd node: forward and backward above, no Python between.
struct RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, double eps) {
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto outputs = rms_norm_forward(xc, wc, eps);
    ctx->save_for_backward({xc, wc, outputs[1]});
    return outputs[0];
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto both = rms_norm_backward(grads[0].contiguous(), saved[0], saved[1], saved[2]);
    return {both[0], both[1], at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return RMSNormFunction::apply(x, w, eps);
}

std::vector<at::Tensor> layer_norm_forward(const at::Tensor& x, const at::Tensor& w,
                                           const std::optional<at::Tensor>& b, double eps) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "layer_norm_forward: contiguous inputs");
  const int64_t d = x.size(-1);
  const int64_t n = x.numel() / d;
  auto y = at::empty_like(x);
  auto mean = at::empty({n}, x.options().dtype(at::kFloat));
  auto rstd = at::empty({n}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "ln_fwd", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const scalar_t* bp = b.has_value() ? b->data_ptr<scalar_t>() : nullptr;
    scalar_t* yp = y.data_ptr<scalar_t>();
    float* mp = mean.data_ptr<float>();
    float* rp = rstd.data_ptr<float>();
    at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
      ablate_ln::forward_rows(xp, wp, bp, yp, mp, rp, begin, end, d, static_cast<float>(eps),
                              to_float<scalar_t>, FromFloat<scalar_t>());
    });
  });
  return {y, mean, rstd};
}

std::vector<at::Tensor> layer_norm_backward(const at::Tensor& g, const at::Tensor& x,
                                            const at::Tensor& w, const at::Tensor& mean,
                                            const at::Tensor& rstd) {
  TORCH_CHECK(g.is_contiguous() && x.is_contiguous(), "layer_norm_backward: contiguous inputs");
  const int64_t d = x.size(-1);
  const int64_t n = x.numel() / d;
  const int64_t blocks = ablate_rms::blocks_for(n);
  auto dx = at::empty_like(x);
  auto partial = at::empty({2, blocks, d}, x.options().dtype(at::kFloat));
  auto dw = at::empty({d}, x.options().dtype(at::kFloat));
  auto db = at::empty({d}, x.options().dtype(at::kFloat));
  float* pw = partial.data_ptr<float>();
  float* pb = pw + blocks * d;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "ln_bwd", [&] {
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const float* mp = mean.data_ptr<float>();
    const float* rp = rstd.data_ptr<float>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        ablate_ln::backward_block(gp, xp, wp, mp, rp, dxp, pw + k * d, pb + k * d, k, n, d,
                                  to_float<scalar_t>, FromFloat<scalar_t>());
      }
    });
  });
  float* dwp = dw.data_ptr<float>();
  float* dbp = db.data_ptr<float>();
  at::parallel_for(0, d, 256, [&](int64_t begin, int64_t end) {
    ablate_rms::sum_blocks(pw, dwp, blocks, d, begin, end);
    ablate_rms::sum_blocks(pb, dbp, blocks, d, begin, end);
  });
  return {dx, dw.to(w.scalar_type()), db.to(w.scalar_type())};
}

namespace {

// y = layer_norm(x, w, b, eps) as one autograd node; b may be None (no bias).
struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, const std::optional<at::Tensor>& b,
                            double eps) {
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    std::optional<at::Tensor> bc;
    if (b.has_value()) bc = b->contiguous();
    auto outputs = layer_norm_forward(xc, wc, bc, eps);
    ctx->save_for_backward({xc, wc, outputs[1], outputs[2]});
    ctx->saved_data["has_bias"] = b.has_value();
    return outputs[0];
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto all = layer_norm_backward(grads[0].contiguous(), saved[0], saved[1], saved[2],
                                   saved[3]);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    return {all[0], all[1], has_bias ? all[2] : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w,
                      const std::optional<at::Tensor>& b, double eps) {
  return LayerNormFunction::apply(x, w, b, eps);
}
