// RMSNorm's arithmetic, row by row, in an order that no compiler or instruction set can change.
//
// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), per row of the last dimension.
// Backward: dx = r * (g*w) - x * c with c = r^3 * mean(g*w*x); dw = sum over rows of g * x * r.
//
// Every sum over a row is kept in LANES fixed partial sums (element j goes to lane j % LANES),
// added in a fixed tree at the end: a compiler may put the lanes in SSE, AVX2 or AVX-512
// registers, but each lane's additions happen in the same order, so the result is the same bits
// for every build target (built without -ffast-math and with -ffp-contract=off: no
// reassociation, no fused multiply-adds). dw is summed over fixed blocks of ROWS_PER_BLOCK rows
// and the blocks' partial rows in block order, so it does not depend on the thread count either.
// Plain C++ (no torch headers): ablate's extension includes it, and a test compiles it alone
// for two instruction sets and compares the output bytes.
#pragma once
#include <cmath>
#include <cstdint>

namespace ablate_rms {

constexpr int64_t LANES = 16;
constexpr int64_t ROWS_PER_BLOCK = 64;

inline float lane_total(float* acc) {
  for (int64_t width = LANES / 2; width >= 1; width /= 2) {
    for (int64_t k = 0; k < width; ++k) acc[k] += acc[k + width];
  }
  return acc[0];
}

template <typename T, typename ToFloat>
float sum_of_squares(const T* __restrict__ x, int64_t d, ToFloat f) {
  float acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= d; j += LANES) {
    for (int64_t k = 0; k < LANES; ++k) {
      const float v = f(x[j + k]);
      acc[k] += v * v;
    }
  }
  for (int64_t k = 0; j < d; ++j, ++k) {
    const float v = f(x[j]);
    acc[k] += v * v;
  }
  return lane_total(acc);
}

template <typename T, typename ToFloat>
float dot3(const T* __restrict__ g, const T* __restrict__ w, const T* __restrict__ x, int64_t d,
           ToFloat f) {
  float acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= d; j += LANES) {
    for (int64_t k = 0; k < LANES; ++k) acc[k] += f(g[j + k]) * f(w[j + k]) * f(x[j + k]);
  }
  for (int64_t k = 0; j < d; ++j, ++k) acc[k] += f(g[j]) * f(w[j]) * f(x[j]);
  return lane_total(acc);
}

// Rows [begin, end): y and each row's r.
template <typename T, typename ToFloat, typename FromFloat>
void forward_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                  float* __restrict__ rstd, int64_t begin, int64_t end, int64_t d, float eps,
                  ToFloat f, FromFloat back) {
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ xi = x + i * d;
    const float r = 1.f / std::sqrt(sum_of_squares(xi, d, f) / static_cast<float>(d) + eps);
    rstd[i] = r;
    T* __restrict__ yi = y + i * d;
    for (int64_t j = 0; j < d; ++j) yi[j] = back(f(xi[j]) * r * f(w[j]));
  }
}

// Block b's rows: dx, and the block's partial dw row (overwritten, not accumulated into).
template <typename T, typename ToFloat, typename FromFloat>
void backward_block(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ dw,
                    int64_t block, int64_t n, int64_t d, ToFloat f, FromFloat back) {
  for (int64_t j = 0; j < d; ++j) dw[j] = 0.f;
  const int64_t begin = block * ROWS_PER_BLOCK;
  const int64_t end = begin + ROWS_PER_BLOCK < n ? begin + ROWS_PER_BLOCK : n;
  for (int64_t i = begin; i < end; ++i) {
    const T* __restrict__ gi = g + i * d;
    const T* __restrict__ xi = x + i * d;
    const float r = rstd[i];
    const float c = dot3(gi, w, xi, d, f) * r * r * r / static_cast<float>(d);
    T* __restrict__ dxi = dx + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float gv = f(gi[j]);
      const float xv = f(xi[j]);
      const float gw = gv * f(w[j]);
      const float xc = xv * c;
      dxi[j] = back(r * gw - xc);
      dw[j] += gv * xv * r;
    }
  }
}

inline int64_t blocks_for(int64_t n) { return (n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; }

// Columns [begin, end) of dw: the blocks' partial rows added in block order.
inline void sum_blocks(const float* __restrict__ partial, float* __restrict__ dw, int64_t blocks,
                       int64_t d, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) {
    float total = 0.f;
    for (int64_t b = 0; b < blocks; ++b) total += partial[b * d + j];
    dw[j] = total;
  }
}

}  // namespace ablate_rms
