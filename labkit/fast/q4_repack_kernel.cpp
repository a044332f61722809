// Q4_1 and Q8_0 weights times Q8_1 activations, on weights repacked 16 rows at a time (llama.cpp's
// "repack" CPU buffers do the same for Q4_0, Q8_0 and IQ4_NL), registered as labkit::q4_1x16_linear and
// labkit::q8_0x16_linear. labkit's Q41Linear and Q80Linear layers store this layout (labkit.fast.repack).
//
// Why: q4_kernel.cpp multiplies one weight row at a time, so every group's integer dot product ends in a
// register of partial sums that must be converted to float and scaled on its own, once per weight row. At
// many activation rows (a prefill, a 16-row decode step) that float work, not memory, bounds it. Here the
// codes of 16 weight rows are interleaved so that one register holds the 16 rows' dot products of a group:
// lane j sums row j. One conversion, one scale and two fused multiply-adds per group then serve 16 outputs.
//
// Layout, per block b of 16 weight rows (N padded to a multiple of 16 with zero rows) and group g:
//     codes    [NB, G, C, 16, 4] bytes: chunk t, row j, byte c = byte 4t + c of row 16b + j's group g as
//              llama.cpp stores it. Q4_1 (C = 4): byte i holds input i in its low nibble and input i + 16
//              in its high one, so chunk t's low nibbles are inputs 4t..4t+3, its high nibbles 16+4t...
//              Q8_0 (C = 8): int8 codes, chunk t is inputs 4t..4t+3.
//     scales   [NB, G, 16] float16 bits: d of row 16b + j
//     minimums [NB, G, 16] float16 bits: m of row 16b + j (Q4_1 only)
// A chunk is 16 rows x 4 bytes: one 512-bit register, which AVX-512 VNNI's vpdpbusd multiplies with 4
// activation codes broadcast to every lane.
//
// Every output y[i, n] is a sum over groups, in order, of fused multiply-adds:
//     acc = fma(d[n,g] * dx[i,g], dot[i,n,g], acc);   acc = fma(m[n,g], s[i,g], acc)   (Q4_1 only)
// The integer dots are exact, so all three paths (scalar, AVX2 with 8 rows a register, AVX-512 with 16)
// give the same bits, and a row's output does not depend on the rows that share its call (tested,
// tests/fast/test_repack.py).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#include "q8_activations.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LABKIT_X86 1
#endif

namespace {

using labkit_q8::ActRow;
using labkit_q8::kGroup;
using labkit_q8::kTaskWeights;

constexpr int64_t kRows = 16;        // weight rows per block
constexpr int64_t kChunk = kRows * 4;  // bytes per chunk: 4 codes' bytes of each of the 16 rows
constexpr int kMostRows = 4;         // activation rows per tile, at most
constexpr int64_t kActBlock = 32;    // activation rows every block meets before the next block's (L1-sized)

struct Block {               // 16 interleaved weight rows
  const uint8_t* codes;      // [G, C, 16, 4]
  const uint16_t* scales;    // [G, 16]
  const uint16_t* minimums;  // [G, 16], or nullptr (Q8_0)
  int64_t groups;
};

// out[r * stride + j] = block row j . activation row r, for j < width and the tile's rows
using BlockTile = void (*)(const Block&, const ActRow*, float* out, int64_t stride, int width);

inline int32_t load4(const int8_t* q) {  // 4 activation codes as one int32, to broadcast
  int32_t v;
  std::memcpy(&v, q, 4);
  return v;
}

// The two formats: how many chunks a group has, whether it has a minimum, and row j's dot product with a
// group of 32 activation codes: scalar, and for all rows at once on AVX2 (8 rows, one half of the block)
// and AVX-512 (16 rows). `prepare` unpacks a block's group once for the tile's rows, `dot` multiplies it
// with one activation row.

struct Q41 {
  static constexpr int kChunks = 4;
  static constexpr bool kMinimum = true;
  static constexpr int kHalvesPerPass = 1;  // AVX2: a half's unpacked codes fill 8 of the 16 registers
  static int32_t dot_scalar(const uint8_t* codes, int j, const int8_t* q) {
    int32_t dot = 0;
    for (int t = 0; t < 4; ++t)
      for (int b = 0; b < 4; ++b) {
        const uint8_t byte = codes[t * kChunk + j * 4 + b];
        dot += (byte & 15) * q[4 * t + b] + (byte >> 4) * q[16 + 4 * t + b];
      }
    return dot;
  }
#ifdef LABKIT_X86
  struct Avx2 {
    __m256i codes[8];  // codes[t]: inputs 4t..4t+3 of 8 rows (low nibbles for t < 4, high ones after)
  };
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline void prepare(const uint8_t* c, int half,
                                                                                   Avx2& w) {
    const __m256i low = _mm256_set1_epi8(15);
    for (int t = 0; t < 4; ++t) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + t * kChunk + half * 32));
      w.codes[t] = _mm256_and_si256(packed, low);
      w.codes[t + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
    }
  }
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i dot(const Avx2& w, const int8_t* q) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {  // 15 * 127 * 2 fits int16: no saturation
      const __m256i x = _mm256_set1_epi32(load4(q + 4 * t));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(w.codes[t], x), ones));
    }
    return sum;
  }
  struct Avx512 {
    __m512i codes[8];
  };
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline void prepare(
      const uint8_t* c, Avx512& w) {
    const __m512i low = _mm512_set1_epi8(15);
    for (int t = 0; t < 4; ++t) {
      const __m512i packed = _mm512_loadu_si512(c + t * kChunk);
      w.codes[t] = _mm512_and_si512(packed, low);
      w.codes[t + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
    }
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i dot(
      const Avx512& w, const int8_t* q) {
    __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();  // two chains; integers: any order
    for (int t = 0; t < 4; ++t) {
      even = _mm512_dpbusd_epi32(even, w.codes[t], _mm512_set1_epi32(load4(q + 4 * t)));
      odd = _mm512_dpbusd_epi32(odd, w.codes[t + 4], _mm512_set1_epi32(load4(q + 16 + 4 * t)));
    }
    return _mm512_add_epi32(even, odd);
  }
#endif
};

struct Q80 {
  static constexpr int kChunks = 8;
  static constexpr bool kMinimum = false;
  static constexpr int kHalvesPerPass = 2;  // AVX2: codes read from L1, so both halves share a pass
  static int32_t dot_scalar(const uint8_t* codes, int j, const int8_t* q) {
    int32_t dot = 0;
    for (int t = 0; t < 8; ++t)
      for (int b = 0; b < 4; ++b) dot += static_cast<int8_t>(codes[t * kChunk + j * 4 + b]) * q[4 * t + b];
    return dot;
  }
#ifdef LABKIT_X86
  struct Avx2 {
    const uint8_t* codes;  // AVX2 has 16 registers: the codes are read from L1 for each row
  };
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline void prepare(const uint8_t* c, int half,
                                                                                   Avx2& w) {
    w.codes = c + half * 32;
  }
  // The multiply-add takes one unsigned operand: |w| times x with w's sign moved onto it, as llama.cpp does
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i dot(const Avx2& w, const int8_t* q) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {  // 127 * 127 * 2 fits int16
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.codes + t * kChunk));
      const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(load4(q + 4 * t)), codes);
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(codes), x), ones));
    }
    return sum;
  }
  struct Avx512 {
    __m512i codes[8];
    __m512i offset;  // 128 * each row's sum of codes
  };
  // vpdpbusd multiplies unsigned by signed: x + 128 (unsigned) times w, less 128 * sum(w), is x . w exactly
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline void prepare(
      const uint8_t* c, Avx512& w) {
    __m512i sum = _mm512_setzero_si512();
    for (int t = 0; t < 8; ++t) {
      w.codes[t] = _mm512_loadu_si512(c + t * kChunk);
      sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), w.codes[t]);
    }
    w.offset = _mm512_slli_epi32(sum, 7);
  }
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"), always_inline)) static inline __m512i dot(
      const Avx512& w, const int8_t* q) {
    __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
    const int32_t flip = static_cast<int32_t>(0x80808080u);  // x ^ 0x80 is x + 128 as an unsigned byte
    for (int t = 0; t < 8; t += 2) {
      even = _mm512_dpbusd_epi32(even, _mm512_set1_epi32(load4(q + 4 * t) ^ flip), w.codes[t]);
      odd = _mm512_dpbusd_epi32(odd, _mm512_set1_epi32(load4(q + 4 * t + 4) ^ flip), w.codes[t + 1]);
    }
    return _mm512_sub_epi32(_mm512_add_epi32(even, odd), w.offset);
  }
#endif
};

template <typename F, int R>
void tile_scalar(const Block& w, const ActRow* x, float* out, int64_t stride, int width) {
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < width; ++j) {
      float acc = 0.f;
      for (int64_t g = 0; g < w.groups; ++g) {
        const int32_t dot = F::dot_scalar(w.codes + g * F::kChunks * kChunk, j, x[r].qx + g * kGroup);
        const float scale = labkit_q8::half_to_float(w.scales[g * kRows + j]) * x[r].dx[g];
        acc = std::fma(scale, static_cast<float>(dot), acc);
        if (F::kMinimum) acc = std::fma(labkit_q8::half_to_float(w.minimums[g * kRows + j]), x[r].sx[g], acc);
      }
      out[r * stride + j] = acc;
    }
}

#ifdef LABKIT_X86

// AVX2: the block as two halves of 8 rows. Q4_1 unpacks a half's codes into registers (AVX2 has 16), so it
// passes over the groups once per half; Q8_0 reads its codes from L1 and takes both halves in one pass.
template <typename F, int R>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const Block& w, const ActRow* x, float* out, int64_t stride,
                                                         int width) {
  constexpr int H = F::kHalvesPerPass;
  for (int first = 0; first * 8 < width; first += H) {
    __m256 acc[H][R];
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.groups; ++g) {
      for (int h = 0; h < H; ++h) {
        const int64_t lane0 = g * kRows + (first + h) * 8;  // the half's first row in the scale tables
        typename F::Avx2 codes;
        F::prepare(w.codes + g * F::kChunks * kChunk, first + h, codes);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + lane0)));
        for (int r = 0; r < R; ++r) {
          const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(x[r].dx[g]));
          acc[h][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(F::dot(codes, x[r].qx + g * kGroup)), acc[h][r]);
        }
        if (F::kMinimum) {
          const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.minimums + lane0)));
          for (int r = 0; r < R; ++r) acc[h][r] = _mm256_fmadd_ps(m, _mm256_set1_ps(x[r].sx[g]), acc[h][r]);
        }
      }
    }
    for (int h = 0; h < H && (first + h) * 8 < width; ++h) {
      const int lanes = std::min(8, width - (first + h) * 8);
      for (int r = 0; r < R; ++r) {
        float lane[8];
        _mm256_storeu_ps(lane, acc[h][r]);
        std::copy(lane, lane + lanes, out + r * stride + (first + h) * 8);
      }
    }
  }
}

template <typename F, int R>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vnni"))) void tile_avx512(const Block& w, const ActRow* x,
                                                                                      float* out, int64_t stride,
                                                                                      int width) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < w.groups; ++g) {
    typename F::Avx512 codes;
    F::prepare(w.codes + g * F::kChunks * kChunk, codes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales + g * kRows)));
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(x[r].dx[g]));
      acc[r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(F::dot(codes, x[r].qx + g * kGroup)), acc[r]);
    }
    if (F::kMinimum) {
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.minimums + g * kRows)));
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(x[r].sx[g]), acc[r]);
    }
  }
  const __mmask16 lanes = static_cast<__mmask16>((1u << width) - 1);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + r * stride, lanes, acc[r]);
}

#endif  // LABKIT_X86

struct Kernel {                  // one format on one path
  BlockTile by_rows[kMostRows];  // by_rows[r - 1] multiplies a block with r activation rows
  int most_rows;
};

struct Path {
  const char* name;
  Kernel q4_1;
  Kernel q8_0;
};

template <typename F>
Kernel scalar_kernel() {
  return {{tile_scalar<F, 1>}, 1};
}

#ifdef LABKIT_X86
template <typename F>
Kernel avx2_kernel() {
  return {{tile_avx2<F, 1>, tile_avx2<F, 2>}, 2};
}

template <typename F>
Kernel avx512_kernel() {
  return {{tile_avx512<F, 1>, tile_avx512<F, 2>, tile_avx512<F, 3>, tile_avx512<F, 4>}, 4};
}
#endif

const Path kPaths[] = {  // slowest first
    {"scalar", scalar_kernel<Q41>(), scalar_kernel<Q80>()},
#ifdef LABKIT_X86
    {"avx2", avx2_kernel<Q41>(), avx2_kernel<Q80>()},
    {"avx512", avx512_kernel<Q41>(), avx512_kernel<Q80>()},
#endif
};

const Path& pick(const std::string& name) { return labkit_q8::pick_path(kPaths, name); }

void check_table(const at::Tensor& t, int64_t blocks, int64_t groups, const char* op) {
  TORCH_CHECK(t.scalar_type() == at::kHalf && t.is_contiguous() && t.numel() == blocks * groups * kRows, op,
              ": scales (and minimums) must be contiguous float16 [ceil(N/16), K/32, 16]");
}

// y [M, N] = x [M, K] @ W.T: threads split the blocks; each block meets the activations in tiles of the
// kernel's most_rows rows, block by block of kActBlock rows, so both stay in L1. No sum changes order.
at::Tensor linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, const uint16_t* minimums,
                  int64_t n, int chunks, const Path& path, const Kernel& kernel, const char* op) {
  labkit_q8::check_x(x, op);
  const int64_t m = x.size(0), k = x.size(1), groups = k / kGroup, blocks = (n + kRows - 1) / kRows;
  const int64_t group_bytes = chunks * kChunk;
  TORCH_CHECK(n >= 0 && codes.element_size() == 1 && codes.is_contiguous() &&
                  codes.numel() == blocks * groups * group_bytes,
              op, ": codes must be contiguous [ceil(N/16), K/32, ", group_bytes, "] bytes with N = ", n, ", K = ", k);
  check_table(scales, blocks, groups, op);
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  const labkit_q8::Q8Rows act = labkit_q8::quantize_q8_1(x32.data_ptr<float>(), m, k, path.name);
  at::Tensor y = at::empty({m, n}, x.options().dtype(at::kFloat));
  float* out = y.data_ptr<float>();
  const auto* c = static_cast<const uint8_t*>(codes.data_ptr());
  const auto* d = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int64_t grain = std::max<int64_t>(1, kTaskWeights / (kRows * k * std::max<int64_t>(m, 1)));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    ActRow tile[kMostRows];
    for (int64_t first = 0; first < m; first += kActBlock) {
      const int64_t last = std::min(m, first + kActBlock);
      for (int64_t b = begin; b < end; ++b) {
        const Block w{c + b * groups * group_bytes, d + b * groups * kRows,
                      minimums ? minimums + b * groups * kRows : nullptr, groups};
        const int width = static_cast<int>(std::min(kRows, n - b * kRows));
        for (int64_t i = first; i < last; i += kernel.most_rows) {
          const int rows = static_cast<int>(std::min<int64_t>(kernel.most_rows, last - i));
          for (int r = 0; r < rows; ++r) tile[r] = labkit_q8::act_row(act, i + r, k);
          kernel.by_rows[rows - 1](w, tile, out + i * n + b * kRows, n, width);
        }
      }
    }
  });
  return x.scalar_type() == at::kFloat ? y : y.to(x.scalar_type());
}

at::Tensor q4_1x16_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                          const at::Tensor& minimums, int64_t n, c10::string_view path) {
  const char* op = "labkit::q4_1x16_linear";
  labkit_q8::check_x(x, op);
  TORCH_CHECK(codes.scalar_type() == at::kByte, op, ": codes must be uint8");
  check_table(minimums, (n + kRows - 1) / kRows, x.size(1) / kGroup, op);
  const Path& p = pick(std::string(path));
  return linear(x, codes, scales, reinterpret_cast<const uint16_t*>(minimums.data_ptr<at::Half>()), n, Q41::kChunks, p,
                p.q4_1, op);
}

at::Tensor q8_0x16_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, int64_t n,
                          c10::string_view path) {
  const char* op = "labkit::q8_0x16_linear";
  TORCH_CHECK(codes.scalar_type() == at::kChar, op, ": codes must be int8");
  const Path& p = pick(std::string(path));
  return linear(x, codes, scales, nullptr, n, Q80::kChunks, p, p.q8_0, op);
}

// x [M, K] -> (codes int8 [M, K], dx float32 [M, K/32], s float32 [M, K/32]): the kernels' Q8_1 rounding
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_q8_1(const at::Tensor& x, c10::string_view path) {
  labkit_q8::check_x(x, "labkit::quantize_q8_1");
  const int64_t m = x.size(0), k = x.size(1);
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  const labkit_q8::Q8Rows act = labkit_q8::quantize_q8_1(x32.data_ptr<float>(), m, k, pick(std::string(path)).name);
  const auto bytes = at::TensorOptions().dtype(at::kChar), floats = at::TensorOptions().dtype(at::kFloat);
  at::Tensor codes = at::empty({m, k}, bytes), dx = at::empty({m, k / kGroup}, floats), s = at::empty_like(dx);
  std::copy(act.q.begin(), act.q.end(), codes.data_ptr<int8_t>());
  std::copy(act.d.begin(), act.d.end(), dx.data_ptr<float>());
  std::copy(act.s.begin(), act.s.end(), s.data_ptr<float>());
  return {codes, dx, s};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def("quantize_q8_1(Tensor x, str path='auto') -> (Tensor, Tensor, Tensor)");
  m.def("q4_1x16_linear(Tensor x, Tensor codes, Tensor scales, Tensor minimums, int n, str path='auto') -> Tensor");
  m.def("q8_0x16_linear(Tensor x, Tensor codes, Tensor scales, int n, str path='auto') -> Tensor");
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) {
  m.impl("q4_1x16_linear", q4_1x16_linear);
  m.impl("q8_0x16_linear", q8_0x16_linear);
  m.impl("quantize_q8_1", quantize_q8_1);
}
