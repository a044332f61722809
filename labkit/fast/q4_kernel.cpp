// labkit's Q4_1 x Q8_1 kernel (notebook 13): llama.cpp's int4 x int8 dot product
// (ggml_vec_dot_q4_1_q8_1), on torch tensors, registered as the op labkit::q4_1_linear; and its
// Q8_0 x Q8_1 twin for the output head (labkit::q8_0_linear), which llama.cpp's Q4_1 files keep in Q8_0.
//
// Weights W [N, K] in groups of 32 inputs: codes q in 0..15, a scale d and a minimum m per group,
// W ~ d * q + m. Byte j (0..15) of a group holds input j in its low nibble and input j + 16 in its
// high nibble (llama.cpp's order: one shift and one mask give 32 codes in input order).
// Activations x [M, K] are quantized per row and group of 32 to int8 (Q8_1, q8_activations.h):
//     dx = absmax / 127,  qx = rint(x * 127 / absmax),  s = dx * sum(qx)
// and   y[i, n] = sum_g  d[n,g] * dx[i,g] * sum_j q[n,j] * qx[i,j]  +  m[n,g] * s[i,g]
// Q8_0 weights are int8 codes -127..127 with a scale per group and no minimum (the m * s term drops).
// The integer sums are exact; the rest accumulates in float32.
//
// labkit's Q41Linear and Q80Linear layers run its twin on weights repacked 16 rows at a time
// (q4_repack_kernel.cpp), which shares the float work of a group across 16 weight rows; this one stays
// the kernel notebook 13 reads and its capstone races.
//
// Three paths, chosen at run time (so one build runs on every x86-64 CPU): AVX-512 VNNI
// (vpdpbusd, two groups per instruction), AVX2 (vpmaddubsw + vpmaddwd, llama.cpp's), and scalar.
//
// Two promises about the float32 sums, both tested (tests/fast/test_kernel.py):
//   - batch invariance: y[i] does not depend on which other rows share the call. A weight row is
//     unpacked once and multiplied with a tile of several activation rows, but each (weight row,
//     activation row) pair keeps its own accumulators, summed in the same order for every tile size.
//   - the AVX2 and AVX-512 paths give the same bits: each sums group g into accumulator g % 4 and
//     adds them as (0 + 2) + (1 + 3), which is where AVX-512's two 16-lane halves put them.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "q8_activations.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LABKIT_X86 1
#endif

namespace {

using labkit_q8::ActRow;
using labkit_q8::half_to_float;
using labkit_q8::kGroup;
using labkit_q8::Q8Rows;
using labkit_q8::quantize_q8_1;

using labkit_q8::kTaskWeights;

struct WeightRow {              // one weight row n
  const uint8_t* codes;        // [G * Format::kBytes]: the row's codes, group after group
  const uint16_t* scales;      // [G] float16 bits
  const uint16_t* minimums;    // [G] float16 bits (Q4_1 only)
  int64_t groups;              // G = K / 32
};

constexpr int kMostRows = 4;   // activation rows per tile, at most
constexpr int64_t kBlockRows = 32;  // activation rows every weight row meets before the next block's (L1-sized)

// out[r * stride] = weight row . activation row r, for the tile's R rows
using TileDot = void (*)(const WeightRow&, const ActRow*, float* out, int64_t stride);

// The two weight formats. Each says how many bytes a group of 32 codes takes, whether it has a minimum
// (the m * s term), and how its codes multiply 32 int8 activations: scalar, AVX2 (8 int32 partial sums of
// one group) and AVX-512 VNNI (16 partial sums: 8 of group g, then 8 of group g + 1). The SIMD forms come
// in two halves: load8/load16 unpacks a weight group once, mul8/mul16 multiplies it with one activation
// row, so a tile of rows shares the unpacking. Partial sum j always holds inputs 4j..4j+3 of its group.

struct Q41 {  // 4-bit codes 0..15; byte j holds input j (low nibble) and input j + 16 (high nibble)
  static constexpr int64_t kBytes = kGroup / 2;
  static constexpr bool kMinimum = true;
  static int32_t dot_scalar(const uint8_t* c, const int8_t* q) {
    int32_t dot = 0;
    for (int64_t j = 0; j < kGroup / 2; ++j) dot += (c[j] & 15) * q[j] + (c[j] >> 4) * q[j + kGroup / 2];
    return dot;
  }
#ifdef LABKIT_X86
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i load8(const uint8_t* c) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15));
  }
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i mul8(__m256i codes,
                                                                                    const int8_t* q) {
    const __m256i pairs = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));  // 15 * 127 * 2 fits int16: no saturation
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i load16(
      const uint8_t* c) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));  // 2 groups x 16 bytes
    __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1);
    codes = _mm512_and_si512(codes, _mm512_set1_epi8(15));  // 128-bit lanes: low g, low g+1, high g, high g+1
    return _mm512_shuffle_i64x2(codes, codes, _MM_SHUFFLE(3, 1, 2, 0));  // low g, high g, low g+1, high g+1
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i mul16(
      __m512i codes, const int8_t* q) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, _mm512_loadu_si512(q));
  }
#endif
};

struct Q80 {  // 8-bit codes -127..127, no minimum (llama.cpp's Q8_0, its output head's format)
  static constexpr int64_t kBytes = kGroup;
  static constexpr bool kMinimum = false;
  static int32_t dot_scalar(const uint8_t* c, const int8_t* q) {
    int32_t dot = 0;
    for (int64_t j = 0; j < kGroup; ++j) dot += static_cast<int8_t>(c[j]) * q[j];
    return dot;
  }
#ifdef LABKIT_X86
  // The multiply-adds take one unsigned operand: |w| times x with w's sign moved onto it, as llama.cpp does.
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i load8(const uint8_t* c) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  }
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i mul8(__m256i w, const int8_t* q) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));  // 127 * 127 * 2 fits int16
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i load16(
      const uint8_t* c) {
    return _mm512_loadu_si512(c);  // 2 groups x 32 bytes
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i mul16(
      __m512i w, const int8_t* q) {
    const __m512i x = _mm512_loadu_si512(q);
    const __m512i signed_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), signed_x);
  }
#endif
};

template <typename F>
void tile_scalar(const WeightRow& w, const ActRow* x, float* out, int64_t) {  // one row: the reference order
  float sum = 0.f;
  for (int64_t g = 0; g < w.groups; ++g) {
    const float dot = static_cast<float>(F::dot_scalar(w.codes + g * F::kBytes, x->qx + g * kGroup));
    sum += half_to_float(w.scales[g]) * x->dx[g] * dot;
    if (F::kMinimum) sum += half_to_float(w.minimums[g]) * x->sx[g];
  }
  *out = sum;
}

#ifdef LABKIT_X86

__attribute__((target("avx2,fma,f16c"), always_inline)) inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// The end of a tile: groups from `first` on, one at a time (those after the last full 8), added to each row's
// sum acc[r]; then all the m * s terms; out[r * stride] = the row's total. Each row's sums run in the same order
// whatever the tile's size; the weight row's codes, scales and minimums are read once for the tile's rows.
template <typename F, int R>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void finish_tile(const WeightRow& w, const ActRow* x,
                                                                                int64_t first, __m256* acc,
                                                                                float* out, int64_t stride) {
  for (int64_t g = first; g < w.groups; ++g) {
    const __m256i codes = F::load8(w.codes + g * F::kBytes);
    const float d = _cvtsh_ss(w.scales[g]);
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_set1_ps(d * x[r].dx[g]);
      acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(F::mul8(codes, x[r].qx + g * kGroup)), acc[r]);
    }
  }
  __m256 msum[R];
  float tail[R];
  for (int r = 0; r < R; ++r) msum[r] = _mm256_setzero_ps(), tail[r] = 0.f;
  if (F::kMinimum) {
    int64_t g = 0;
    for (; g + 8 <= w.groups; g += 8) {
      const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.minimums + g)));
      for (int r = 0; r < R; ++r) msum[r] = _mm256_fmadd_ps(m, _mm256_loadu_ps(x[r].sx + g), msum[r]);
    }
    for (; g < w.groups; ++g) {
      const float m = _cvtsh_ss(w.minimums[g]);
      for (int r = 0; r < R; ++r) tail[r] += m * x[r].sx[g];
    }
  }
  for (int r = 0; r < R; ++r) out[r * stride] = hsum8(_mm256_add_ps(acc[r], msum[r])) + tail[r];
}

// d * dx of groups g..g+7, for each of the tile's R rows
template <int R>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void group_scales(const WeightRow& w,
                                                                                 const ActRow* x, int64_t g,
                                                                                 __m256* scale) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + g)));
  for (int r = 0; r < R; ++r) scale[r] = _mm256_mul_ps(d, _mm256_loadu_ps(x[r].dx + g));
}

template <typename F, int R>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const WeightRow& w, const ActRow* x, float* out,
                                                         int64_t stride) {
  __m256 acc[R][4];  // acc[r][g % 4]: four chains hide the FMA latency
  for (int r = 0; r < R; ++r)
    for (int a = 0; a < 4; ++a) acc[r][a] = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= w.groups; g += 8) {
    __m256 scale[R];
    group_scales<R>(w, x, g, scale);
    for (int k = 0; k < 8; ++k) {
      const __m256i codes = F::load8(w.codes + (g + k) * F::kBytes);
      for (int r = 0; r < R; ++r) {
        const __m256 s = _mm256_permutevar8x32_ps(scale[r], _mm256_set1_epi32(k));
        const __m256i dot = F::mul8(codes, x[r].qx + (g + k) * kGroup);
        acc[r][k % 4] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot), acc[r][k % 4]);
      }
    }
  }
  __m256 sum[R];
  for (int r = 0; r < R; ++r)
    sum[r] = _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][2]), _mm256_add_ps(acc[r][1], acc[r][3]));
  finish_tile<F, R>(w, x, g, sum, out, stride);
}

template <typename F, int R>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"))) void tile_avx512(const WeightRow& w,
                                                                                      const ActRow* x, float* out,
                                                                                      int64_t stride) {
  const __m512i spread[4] = {  // float k of 8 into lanes 0-7 and k + 1 into lanes 8-15
      _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
      _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
      _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
      _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
  __m512 acc0[R], acc1[R];  // lanes 0-7 of acc0 sum groups g % 4 == 0, lanes 8-15 g % 4 == 1; acc1: 2 and 3
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= w.groups; g += 8) {
    __m256 scale[R];
    group_scales<R>(w, x, g, scale);
    for (int k = 0; k < 4; k += 2) {
      const __m512i c0 = F::load16(w.codes + (g + 2 * k) * F::kBytes);
      const __m512i c1 = F::load16(w.codes + (g + 2 * k + 2) * F::kBytes);
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_castps256_ps512(scale[r]);
        const __m512i p0 = F::mul16(c0, x[r].qx + (g + 2 * k) * kGroup);
        const __m512i p1 = F::mul16(c1, x[r].qx + (g + 2 * k + 2) * kGroup);
        acc0[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread[k], s), _mm512_cvtepi32_ps(p0), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread[k + 1], s), _mm512_cvtepi32_ps(p1), acc1[r]);
      }
    }
  }
  __m256 sum[R];
  for (int r = 0; r < R; ++r) {
    const __m512 acc = _mm512_add_ps(acc0[r], acc1[r]);  // lanes 0-7: (0 + 2), lanes 8-15: (1 + 3)
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    sum[r] = _mm256_add_ps(_mm512_castps512_ps256(acc), high);
  }
  finish_tile<F, R>(w, x, g, sum, out, stride);
}

#endif  // LABKIT_X86

struct Kernel {                  // one format on one path
  TileDot by_rows[kMostRows];    // by_rows[r - 1] multiplies a weight row with r activation rows
  int64_t most_rows;             // the largest tile this path takes
};

template <typename F>
Kernel scalar_kernel() {
  return {{tile_scalar<F>}, 1};
}

#ifdef LABKIT_X86
template <typename F>
Kernel avx2_kernel() {  // 2 rows x 4 chains = 8 of AVX2's 16 registers
  return {{tile_avx2<F, 1>, tile_avx2<F, 2>}, 2};
}

template <typename F>
Kernel avx512_kernel() {
  return {{tile_avx512<F, 1>, tile_avx512<F, 2>, tile_avx512<F, 3>, tile_avx512<F, 4>}, 4};
}
#endif

struct Path {
  const char* name;
  Kernel q4_1;
  Kernel q8_0;
};

const Path kPaths[] = {  // slowest first
    {"scalar", scalar_kernel<Q41>(), scalar_kernel<Q80>()},
#ifdef LABKIT_X86
    {"avx2", avx2_kernel<Q41>(), avx2_kernel<Q80>()},
    {"avx512", avx512_kernel<Q41>(), avx512_kernel<Q80>()},
#endif
};

std::string q4_1_paths() {  // the paths this CPU runs, comma-separated, slowest first
  std::string names;
  for (const Path& p : kPaths)
    if (labkit_q8::cpu_runs(p.name)) names += (names.empty() ? "" : ",") + std::string(p.name);
  return names;
}

const Path& pick(const std::string& name) { return labkit_q8::pick_path(kPaths, name); }

void check_group_table(const at::Tensor& t, int64_t n, int64_t k, const char* op) {
  TORCH_CHECK(t.scalar_type() == at::kHalf && t.dim() == 2 && t.size(0) == n && t.size(1) * kGroup == k &&
                  t.is_contiguous(),
              op, ": scales (and minimums) must be contiguous float16 [N, K/32]");
}

// y [M, N] = x [M, K] @ W.T with W's row n at codes + n * row_bytes: each weight row against tiles of
// the kernel's most_rows activation rows (the last tile may be smaller), the weight row unpacked once a tile;
// the activations in blocks of kBlockRows rows that each thread's weight rows all meet in turn, so a long
// prefill's activations are read from L1, not once per weight row from L2. No sum changes order.
at::Tensor linear(const at::Tensor& x, const uint8_t* codes, int64_t n, int64_t row_bytes, const at::Tensor& scales,
                  const uint16_t* minimums, const Path& path, const Kernel& kernel) {
  const int64_t m = x.size(0), k = x.size(1), groups = k / kGroup;
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  const Q8Rows act = quantize_q8_1(x32.data_ptr<float>(), m, k, path.name);
  at::Tensor y = at::empty({m, n}, x.options().dtype(at::kFloat));
  float* out = y.data_ptr<float>();
  const auto* d = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int64_t grain = std::max<int64_t>(1, kTaskWeights / (k * std::max<int64_t>(m, 1)));  // small: one thread
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    ActRow tile[kMostRows];
    for (int64_t block = 0; block < m; block += kBlockRows) {  // the block's activations stay in L1 for every row
      const int64_t block_end = std::min(m, block + kBlockRows);
      for (int64_t row = begin; row < end; ++row) {
        const WeightRow w{codes + row * row_bytes, d + row * groups, minimums ? minimums + row * groups : nullptr,
                          groups};
        for (int64_t i = block; i < block_end; i += kernel.most_rows) {  // the weight row stays in L1 meanwhile
          const int64_t rows = std::min(kernel.most_rows, block_end - i);
          for (int64_t r = 0; r < rows; ++r)
            tile[r] = {act.q.data() + (i + r) * k, act.d.data() + (i + r) * groups, act.s.data() + (i + r) * groups};
          kernel.by_rows[rows - 1](w, tile, out + i * n + row, n);
        }
      }
    }
  });
  return x.scalar_type() == at::kFloat ? y : y.to(x.scalar_type());
}

at::Tensor q4_1_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                       const at::Tensor& minimums, c10::string_view path) {
  const char* op = "labkit::q4_1_linear";
  labkit_q8::check_x(x, op);
  const int64_t k = x.size(1), n = codes.size(0);
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.dim() == 2 && codes.size(1) * 2 == k && codes.is_contiguous(),
              op, ": codes must be contiguous uint8 [N, K/2] with K = ", k);
  check_group_table(scales, n, k, op);
  check_group_table(minimums, n, k, op);
  const Path& p = pick(std::string(path));
  return linear(x, codes.data_ptr<uint8_t>(), n, k / 2, scales,
                reinterpret_cast<const uint16_t*>(minimums.data_ptr<at::Half>()), p, p.q4_1);
}

at::Tensor q8_0_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, c10::string_view path) {
  const char* op = "labkit::q8_0_linear";
  labkit_q8::check_x(x, op);
  const int64_t k = x.size(1), n = codes.size(0);
  TORCH_CHECK(codes.scalar_type() == at::kChar && codes.dim() == 2 && codes.size(1) == k && codes.is_contiguous(),
              op, ": codes must be contiguous int8 [N, K] with K = ", k);
  check_group_table(scales, n, k, op);
  const Path& p = pick(std::string(path));
  return linear(x, reinterpret_cast<const uint8_t*>(codes.data_ptr<int8_t>()), n, k, scales, nullptr,
                p, p.q8_0);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def("q4_1_linear(Tensor x, Tensor codes, Tensor scales, Tensor minimums, str path='auto') -> Tensor");
  m.def("q8_0_linear(Tensor x, Tensor codes, Tensor scales, str path='auto') -> Tensor");
  m.def("q4_1_paths() -> str", q4_1_paths);
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) {
  m.impl("q4_1_linear", q4_1_linear);
  m.impl("q8_0_linear", q8_0_linear);
}
