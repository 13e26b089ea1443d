// LayerNorm's arithmetic, row by row, in the fixed order of rms_norm_rows.h.
//
// y = (x - m) * r * w + b with m = mean(x), r = 1 / sqrt(mean((x - m)^2) + eps), per row.
// Backward, with h = (x - m) * r and gw = g * w: dx = r * (gw - mean(gw) - h * mean(gw * h));
// dw = sum over rows of g * h; db = sum over rows of g.
//
// Row sums use the LANES fixed partial sums of ablate_rms and the two-pass variance (mean first,
// then squared deviations); dw and db are summed over ROWS_PER_BLOCK-row blocks and the blocks
// in block order. So the bits do not depend on the build target or the thread count, which
// torch's own CPU LayerNorm does not promise: its weight and bias gradients are summed in
// per-thread buffers (measured: other bits at 1, 2 and 4 threads; docs/results.md).
#pragma once
#include "rms_norm_rows.h"

namespace ablate_ln {

using ablate_rms::LANES;
using ablate_rms::lane_total;
using ablate_rms::ROWS_PER_BLOCK;

// term(0) + ... + term(d - 1), element j in lane j % LANES, the lanes added in lane_total's tree.
template <typename Term>
float lane_sum(int64_t d, Term term) {
  float acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= d; j += LANES) {
    for (int64_t k = 0; k < LANES; ++k) acc[k] += term(j + k);
  }
  for (int64_t k = 0; j < d; ++j, ++k) acc[k] += term(j);
  return lane_total(acc);
}

// Rows [begin, end): y, each row's mean and r. b is null without a bias.
template <typename T, typename ToFloat, typename FromFloat>
void forward_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                  T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                  int64_t begin, int64_t end, int64_t d, float eps, ToFloat f, FromFloat back) {
  const float n = static_cast<float>(d);
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ xi = x + i * d;
    const float m = lane_sum(d, [&](int64_t j) { return f(xi[j]); }) / n;
    const float var = lane_sum(d, [&](int64_t j) {
      const float v = f(xi[j]) - m;
      return v * v;
    });
    const float r = 1.f / std::sqrt(var / n + eps);
    mean[i] = m;
    rstd[i] = r;
    T* __restrict__ yi = y + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float v = (f(xi[j]) - m) * r * f(w[j]);
      yi[j] = back(b != nullptr ? v + f(b[j]) : v);
    }
  }
}

// Block's rows: dx, and the block's partial dw and db rows (overwritten).
template <typename T, typename ToFloat, typename FromFloat>
void backward_block(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                    const float* __restrict__ mean, const float* __restrict__ rstd,
                    T* __restrict__ dx, float* __restrict__ dw, float* __restrict__ db,
                    int64_t block, int64_t n, int64_t d, ToFloat f, FromFloat back) {
  for (int64_t j = 0; j < d; ++j) {
    dw[j] = 0.f;
    db[j] = 0.f;
  }
  const float size = static_cast<float>(d);
  const int64_t begin = block * ROWS_PER_BLOCK;
  const int64_t end = begin + ROWS_PER_BLOCK < n ? begin + ROWS_PER_BLOCK : n;
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ gi = g + i * d;
    const T* __restrict__ xi = x + i * d;
    const float m = mean[i];
    const float r = rstd[i];
    float acc_gw[LANES] = {};
    float acc_gwh[LANES] = {};
    for (int64_t j = 0; j < d; ++j) {
      const float gw = f(gi[j]) * f(w[j]);
      acc_gw[j % LANES] += gw;
      acc_gwh[j % LANES] += gw * ((f(xi[j]) - m) * r);
    }
    const float a = lane_total(acc_gw) / size;
    const float c = lane_total(acc_gwh) / size;
    T* __restrict__ dxi = dx + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float gv = f(gi[j]);
      const float h = (f(xi[j]) - m) * r;
      const float hc = h * c;
      dxi[j] = back(r * (gv * f(w[j]) - a - hc));
      dw[j] += gv * h;
      db[j] += gv;
    }
  }
}

}  // namespace ablate_ln
