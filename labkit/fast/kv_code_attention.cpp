// labkit's decode attention over a quantized KV cache's codes, registered as the op labkit::kv_code_attention
// (labkit.fast.code_attention; its CodeReadingKVCache calls it for a one-token step).
//
// One query token per (row b, head h) attends to keys 0..S-1 kept as labkit.quant.quantized_kv's
// QuantizedRows keeps them, never dequantized into memory:
//   int8: codes uint8 [.., D], value (c - 128) * s, one float16 scale s per row
//   int4: codes uint8 [.., D/2], element 2i in byte i's low nibble and 2i+1 in its high one,
//         value c * s_g + m_g, a float16 scale and minimum per group of 32 (all of D when shorter)
//   score_{h,s} = (q_h . k_s) * scale + mask_s,   p = softmax over s,   out_h = sum_s p_{h,s} v_s
// with grouped-query heads: query head h reads key/value head h / (H / H_kv). A task is one (row, KV head) and
// a chunk of 512 keys, so a long context splits over every thread even at batch 1 (SmolLM2 has 3 KV heads for
// 2 threads); each chunk's softmax runs against its own max, and the chunks are merged after, rescaled to the
// overall max (FlashDecoding, Dao et al. 2023). rotate (int4-rot, whose rows are stored as k H and v H): the
// query is multiplied by H first and the output by H last, in a Walsh-Hadamard transform each. A task's
// query heads read each key and value row once. The scalar path decodes each row as dequantize_groupwise does
// ((c - 128) * s; c * s + m). The AVX2 path multiplies the codes as they are, 16 at a time in registers, and
// applies each group's scale (and int4's minimum) once to their sums:
//   q . k = sum_g s_g (q_g . c_g) + m_g sum(q_g),    out += sum_g (p s_g) c_g + p m_g
// so both equal the dequantize-then-attend path up to float32 rounding of the sums (and, on the AVX2 path, of
// exp: a polynomial within 2 ulps, 8 keys at a time).
//
// Two paths, chosen at run time: AVX2 (+FMA, F16C; AVX-512 CPUs run it too) and scalar.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define LABKIT_X86 1
#endif

namespace {

constexpr int64_t kBlock = 4;  // query heads that share one pass over the key rows

struct CodeRows {  // one (row, KV head): row s's codes at codes + s * code_stride, its scales likewise
  const uint8_t* codes;
  const c10::Half* scales;
  const c10::Half* minimums;  // nullptr for int8
  int64_t code_stride, scale_stride, group;
};

struct Task {                 // one (row, KV head) and its query heads
  const float* const* q;      // heads pointers to [D]
  int64_t heads, keys, d;
  const float* mask;          // key s's additive mask at mask[s * mask_stride]
  int64_t mask_stride;
  float scale;
  const float* qsums;         // [heads][groups]: each head's query summed over each group of the keys' codes
};

template <bool kInt4>
void decode_row_scalar(const CodeRows& r, int64_t s, int64_t d, float* out) {
  const uint8_t* c = r.codes + s * r.code_stride;
  for (int64_t j = 0; j < d; ++j) {
    const int64_t g = s * r.scale_stride + j / r.group;
    if (kInt4) {
      const float code = float((j & 1) ? (c[j / 2] >> 4) : (c[j / 2] & 0x0F));
      out[j] = code * float(r.scales[g]) + float(r.minimums[g]);
    } else {
      out[j] = (float(c[j]) - 128.f) * float(r.scales[g]);
    }
  }
}

template <bool kInt4>
void scores_scalar(const Task& t, const CodeRows& k, float* scores) {  // scores [heads][keys], unscaled
  std::vector<float> row(t.d);
  for (int64_t s = 0; s < t.keys; ++s) {
    decode_row_scalar<kInt4>(k, s, t.d, row.data());
    for (int64_t h = 0; h < t.heads; ++h) {
      float sum = 0.f;
      for (int64_t j = 0; j < t.d; ++j) sum = std::fma(t.q[h][j], row[j], sum);
      scores[h * t.keys + s] = sum;
    }
  }
}

template <bool kInt4>
void values_scalar(const Task& t, const float* p, const CodeRows& v, float* out) {  // out [heads][d] += p v
  std::vector<float> row(t.d);
  for (int64_t s = 0; s < t.keys; ++s) {
    decode_row_scalar<kInt4>(v, s, t.d, row.data());
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t j = 0; j < t.d; ++j) out[h * t.d + j] = std::fma(p[h * t.keys + s], row[j], out[h * t.d + j]);
  }
}

// Each head's scores scaled and masked, then e^(score - max) in place; total[h]: their sum, top[h]: the max.
void softmax_scalar(const Task& t, float* scores, float* total, float* top_of) {
  for (int64_t h = 0; h < t.heads; ++h) {
    float* w = scores + h * t.keys;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < t.keys; ++s) {
      w[s] = w[s] * t.scale + t.mask[s * t.mask_stride];
      top = std::max(top, w[s]);
    }
    float sum = 0.f;
    for (int64_t s = 0; s < t.keys; ++s) {
      w[s] = top == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(w[s] - top);
      sum += w[s];
    }
    total[h] = sum;
    top_of[h] = top;
  }
}

#ifdef LABKIT_X86

__attribute__((target("avx2,fma,f16c"), always_inline)) inline float sum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// A row's codes c..c + 8 kWide - 1 as floats in x[0..kWide), not yet scaled: int8's c - 128 (exact: the byte's
// top bit flipped, then sign-extended), int4's c in 0..15 (element 2i in byte i's low nibble, 2i+1 in its high).
template <bool kInt4, int kWide>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void raw_codes(const uint8_t* codes, int64_t c,
                                                                              __m256* x) {
  __m128i bytes;  // int8: 8 kWide codes; int4: 8 kWide codes in order, one a byte
  if (kInt4) {
    int32_t word;  // four bytes: eight codes
    if (kWide == 1) std::memcpy(&word, codes + c / 2, 4);
    const __m128i packed =
        kWide == 2 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + c / 2)) : _mm_cvtsi32_si128(word);
    const __m128i nibble = _mm_set1_epi8(0x0F);
    bytes = _mm_unpacklo_epi8(_mm_and_si128(packed, nibble), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
    x[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    if (kWide == 2) x[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
    return;
  }
  bytes = kWide == 2 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c))
                     : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + c));
  bytes = _mm_xor_si128(bytes, _mm_set1_epi8(static_cast<char>(0x80)));
  x[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  if (kWide == 2) x[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
}

// kHeads query heads from h0 on (a compile-time count, so their sums stay in registers): scores of every key.
// Per group, q . k = s (q . c) + m (sum of q over the group) for int4 (c * s + m) and s (q . (c - 128)) for
// int8: the codes are multiplied by q as they are, and the scale once a group (t.qsums: each head's sums of q).
template <bool kInt4, int kHeads, int kWide>
__attribute__((target("avx2,fma,f16c"))) void scores_block(const Task& t, const CodeRows& k, int64_t h0,
                                                           float* scores) {
  const int64_t groups = t.d / k.group;
  for (int64_t s = 0; s < t.keys; ++s) {
    const uint8_t* codes = k.codes + s * k.code_stride;
    const c10::Half* scale = k.scales + s * k.scale_stride;
    __m256 acc[kHeads];
    float offset[kHeads] = {};
    for (int j = 0; j < kHeads; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256 part[kWide][kHeads], x[kWide];  // one chain of multiply-adds per vector of a step, not one
      for (int w = 0; w < kWide; ++w)
        for (int j = 0; j < kHeads; ++j) part[w][j] = _mm256_setzero_ps();
      for (int64_t c = g * k.group; c < (g + 1) * k.group; c += 8 * kWide) {
        raw_codes<kInt4, kWide>(codes, c, x);
        for (int w = 0; w < kWide; ++w)
          for (int j = 0; j < kHeads; ++j)
            part[w][j] = _mm256_fmadd_ps(_mm256_loadu_ps(t.q[h0 + j] + c + 8 * w), x[w], part[w][j]);
      }
      const __m256 step = _mm256_set1_ps(_cvtsh_ss(scale[g].x));
      for (int j = 0; j < kHeads; ++j)
        acc[j] = _mm256_fmadd_ps(kWide == 2 ? _mm256_add_ps(part[0][j], part[kWide - 1][j]) : part[0][j], step,
                                 acc[j]);
      if (kInt4) {
        const float minimum = _cvtsh_ss(k.minimums[s * k.scale_stride + g].x);
        for (int j = 0; j < kHeads; ++j) offset[j] += minimum * t.qsums[(h0 + j) * groups + g];
      }
    }
    for (int j = 0; j < kHeads; ++j) scores[(h0 + j) * t.keys + s] = sum8(acc[j]) + offset[j];
  }
}

// kHeads heads' outputs, kVecs x 8 features of one group at a time summed in registers over every key, in key
// order: out += (p s) c for each key's codes c, and p m (int4's minimum) added once to every feature at the end.
template <bool kInt4, int kHeads, int kVecs, int kWide>
__attribute__((target("avx2,fma,f16c"))) void values_block(const Task& t, const float* p, const CodeRows& v,
                                                           int64_t h0, float* out) {
  for (int64_t first = 0; first < t.d; first += 8 * kVecs) {
    const int64_t g = first / v.group;  // 8 * kVecs divides the group: one group
    __m256 acc[kHeads][kVecs], x[kWide], weight[kHeads];
    float offset[kHeads] = {};
    for (int j = 0; j < kHeads; ++j)
      for (int f = 0; f < kVecs; ++f) acc[j][f] = _mm256_setzero_ps();
    for (int64_t s = 0; s < t.keys; ++s) {
      const uint8_t* codes = v.codes + s * v.code_stride;
      const float step = _cvtsh_ss(v.scales[s * v.scale_stride + g].x);
      for (int j = 0; j < kHeads; ++j) weight[j] = _mm256_set1_ps(p[(h0 + j) * t.keys + s] * step);
      if (kInt4) {
        const float minimum = _cvtsh_ss(v.minimums[s * v.scale_stride + g].x);
        for (int j = 0; j < kHeads; ++j) offset[j] += p[(h0 + j) * t.keys + s] * minimum;
      }
      for (int f = 0; f < kVecs; f += kWide) {
        raw_codes<kInt4, kWide>(codes, first + 8 * f, x);
        for (int w = 0; w < kWide; ++w)
          for (int j = 0; j < kHeads; ++j) acc[j][f + w] = _mm256_fmadd_ps(weight[j], x[w], acc[j][f + w]);
      }
    }
    for (int j = 0; j < kHeads; ++j)
      for (int f = 0; f < kVecs; ++f)
        _mm256_storeu_ps(out + (h0 + j) * t.d + first + 8 * f, _mm256_add_ps(acc[j][f], _mm256_set1_ps(offset[j])));
  }
}

// e^x for x <= 0 (Cephes' expf: 2^n times a degree-6 polynomial, within 2 float32 ulps); 0 below -87.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 exp8(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(two_n)));
}

// As softmax_scalar, 8 keys at a time (the sums in another order) where the mask is contiguous.
__attribute__((target("avx2,fma,f16c"))) void softmax_avx2(const Task& t, float* scores, float* total,
                                                           float* top_of) {
  if (t.mask_stride != 1 || t.keys < 8) return softmax_scalar(t, scores, total, top_of);
  const int64_t whole = t.keys / 8 * 8;
  const __m256 scale = _mm256_set1_ps(t.scale);
  for (int64_t h = 0; h < t.heads; ++h) {
    float* w = scores + h * t.keys;
    __m256 top8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t s = 0; s < whole; s += 8) {
      const __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(w + s), scale, _mm256_loadu_ps(t.mask + s));
      _mm256_storeu_ps(w + s, x);
      top8 = _mm256_max_ps(top8, x);
    }
    float lanes[8], top = -std::numeric_limits<float>::infinity();
    _mm256_storeu_ps(lanes, top8);
    for (float lane : lanes) top = std::max(top, lane);
    for (int64_t s = whole; s < t.keys; ++s) top = std::max(top, w[s] = w[s] * t.scale + t.mask[s]);
    top_of[h] = top;
    if (top == -std::numeric_limits<float>::infinity()) {  // every key masked: no weight anywhere
      std::fill(w, w + t.keys, 0.f);
      total[h] = 0.f;
      continue;
    }
    __m256 sum8v = _mm256_setzero_ps();
    for (int64_t s = 0; s < whole; s += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(w + s), _mm256_set1_ps(top)));
      _mm256_storeu_ps(w + s, e);
      sum8v = _mm256_add_ps(sum8v, e);
    }
    float sum = sum8(sum8v);
    for (int64_t s = whole; s < t.keys; ++s) sum += (w[s] = std::exp(w[s] - top));
    total[h] = sum;
  }
}

constexpr int kAvx2Heads = 3;  // heads a block holds: 3 x 4 sums of 8 in registers, with room for the rest

template <bool kInt4>
__attribute__((target("avx2,fma,f16c"))) void scores_avx2(const Task& t, const CodeRows& k, float* scores) {
  const bool wide = k.group % 16 == 0;  // two vectors of codes a step
  for (int64_t h0 = 0; h0 < t.heads; h0 += kAvx2Heads) {
    const int64_t n = std::min<int64_t>(kAvx2Heads, t.heads - h0);
    if (wide && n == 3) scores_block<kInt4, 3, 2>(t, k, h0, scores);
    else if (wide && n == 2) scores_block<kInt4, 2, 2>(t, k, h0, scores);
    else if (wide) scores_block<kInt4, 1, 2>(t, k, h0, scores);
    else if (n == 3) scores_block<kInt4, 3, 1>(t, k, h0, scores);
    else if (n == 2) scores_block<kInt4, 2, 1>(t, k, h0, scores);
    else scores_block<kInt4, 1, 1>(t, k, h0, scores);
  }
}

template <bool kInt4>
__attribute__((target("avx2,fma,f16c"))) void values_avx2(const Task& t, const float* p, const CodeRows& v,
                                                          float* out) {
  const bool wide = (v.group % 32) == 0;  // 4 vectors of 8 features within one group, 2 decoded at a time
  for (int64_t h0 = 0; h0 < t.heads; h0 += kAvx2Heads) {
    const int64_t n = std::min<int64_t>(kAvx2Heads, t.heads - h0);
    if (wide && n == 3) values_block<kInt4, 3, 4, 2>(t, p, v, h0, out);
    else if (wide && n == 2) values_block<kInt4, 2, 4, 2>(t, p, v, h0, out);
    else if (wide) values_block<kInt4, 1, 4, 2>(t, p, v, h0, out);
    else if (n == 3) values_block<kInt4, 3, 1, 1>(t, p, v, h0, out);
    else if (n == 2) values_block<kInt4, 2, 1, 1>(t, p, v, h0, out);
    else values_block<kInt4, 1, 1, 1>(t, p, v, h0, out);
  }
}

#endif  // LABKIT_X86

using Scores = void (*)(const Task&, const CodeRows&, float*);
using Values = void (*)(const Task&, const float*, const CodeRows&, float*);
using Softmax = void (*)(const Task&, float*, float*, float*);

struct Path {
  Scores scores[2];  // [int8, int4]
  Values values[2];
  Softmax softmax;
};

Path pick(const std::string& name) {
#ifdef LABKIT_X86
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (name == "avx2" || (name == "auto" && avx2)) {
    TORCH_CHECK(avx2, "labkit::kv_code_attention: path 'avx2' is not available on this CPU");
    return {{scores_avx2<false>, scores_avx2<true>}, {values_avx2<false>, values_avx2<true>}, softmax_avx2};
  }
#endif
  TORCH_CHECK(name == "auto" || name == "scalar", "labkit::kv_code_attention: path '", name,
              "' is not one of auto, scalar, avx2 (on x86)");
  return {{scores_scalar<false>, scores_scalar<true>}, {values_scalar<false>, values_scalar<true>}, softmax_scalar};
}

// The rows of batch row b and KV head kv from key `first` on.
CodeRows rows_of(const at::Tensor& codes, const at::Tensor& scales, const c10::optional<at::Tensor>& minimums,
                 int64_t b, int64_t kv, int64_t first, int64_t d) {
  const auto at = [&](const at::Tensor& t) { return b * t.stride(0) + kv * t.stride(1) + first * t.stride(2); };
  const c10::Half* m = minimums.has_value() ? minimums->data_ptr<c10::Half>() + at(*minimums) : nullptr;
  return {codes.data_ptr<uint8_t>() + at(codes), scales.data_ptr<c10::Half>() + at(scales), m, codes.stride(2),
          scales.stride(2), d / scales.size(3)};
}

// x H in place for each of `rows` rows of d floats: the normalized Hadamard matrix (labkit.quant.hadamard), as a
// Walsh-Hadamard transform (d log d additions instead of a d x d product).
void rotate_rows(float* x, int64_t rows, int64_t d) {
  const float entry = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (float* row = x; row < x + rows * d; row += d) {
    for (int64_t half = 1; half < d; half *= 2)
      for (int64_t i = 0; i < d; i += 2 * half)
        for (int64_t j = i; j < i + half; ++j) {
          const float a = row[j], c = row[j + half];
          row[j] = a + c;
          row[j + half] = a - c;
        }
    for (int64_t j = 0; j < d; ++j) row[j] *= entry;
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& codes, const at::Tensor& scales,
                  const c10::optional<at::Tensor>& minimums, const at::Tensor& mask) {
  const char* op = "labkit::kv_code_attention";
  const int64_t d = q.size(3), b = q.size(0), keys = mask.size(1);
  TORCH_CHECK(q.dim() == 4 && q.size(2) == 1 && q.scalar_type() == at::kFloat && q.is_contiguous(), op,
              ": q must be a contiguous float32 [B, H, 1, D]");
  TORCH_CHECK(d % 8 == 0, op, ": head_dim ", d, " must be a multiple of 8");
  const bool int4 = minimums.has_value();
  TORCH_CHECK(codes.dim() == 4 && codes.scalar_type() == at::kByte && codes.size(0) == b &&
                  codes.size(3) == (int4 ? d / 2 : d) && codes.stride(3) == 1 && codes.size(2) >= keys,
              op, ": codes must be uint8 [B, H_kv, >= S, D] (int8) or [B, H_kv, >= S, D / 2] (int4)");
  TORCH_CHECK(q.size(1) % codes.size(1) == 0 && q.size(1) / codes.size(1) <= 4 * kBlock, op,
              ": H must be a multiple of H_kv, at most 16 times it");
  for (const at::Tensor* t : {&scales, minimums.has_value() ? &*minimums : &scales})
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->dim() == 4 && t->stride(3) == 1 &&
                    t->sizes().slice(0, 3) == codes.sizes().slice(0, 3) && d % t->size(3) == 0 &&
                    (d / t->size(3)) % 8 == 0,
                op, ": scales and minimums must be float16 [B, H_kv, >= S, groups], groups of a multiple of 8");
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == b && mask.scalar_type() == at::kFloat, op,
              ": mask must be float32 [B, S]");
}

constexpr int64_t kChunkKeys = 512;  // keys one task reads: a long context splits over every thread

// What one task leaves for the merge: each of its query heads' max score, sum of e^(score - max), and
// sum of e^(score - max) v (unnormalized) over its chunk of keys.
struct Partial {
  std::vector<float> top, total, out;  // [heads], [heads], [heads * d]
};

// out [heads * d] = sum_c e^(top_c - top) out_c / sum_c e^(top_c - top) total_c over the chunks (FlashDecoding's
// merge: each chunk's softmax was taken against its own max).
void merge(const Partial* chunks, int64_t n, int64_t heads, int64_t d, float* out) {
  for (int64_t h = 0; h < heads; ++h) {
    float top = -std::numeric_limits<float>::infinity(), total = 0.f;
    for (int64_t c = 0; c < n; ++c) top = std::max(top, chunks[c].top[h]);
    float* o = out + h * d;
    std::fill(o, o + d, 0.f);
    if (top == -std::numeric_limits<float>::infinity()) continue;  // every key masked: no weight anywhere
    for (int64_t c = 0; c < n; ++c) {
      if (chunks[c].total[h] == 0.f) continue;
      const float weight = std::exp(chunks[c].top[h] - top);
      total += weight * chunks[c].total[h];
      for (int64_t f = 0; f < d; ++f) o[f] += weight * chunks[c].out[h * d + f];
    }
    for (int64_t f = 0; f < d; ++f) o[f] /= total;
  }
}

at::Tensor kv_code_attention(const at::Tensor& q, const at::Tensor& k_codes, const at::Tensor& k_scales,
                             const c10::optional<at::Tensor>& k_minimums, const at::Tensor& v_codes,
                             const at::Tensor& v_scales, const c10::optional<at::Tensor>& v_minimums,
                             const at::Tensor& mask, double scale, bool rotate, c10::string_view path_name) {
  check_inputs(q, k_codes, k_scales, k_minimums, mask);
  check_inputs(q, v_codes, v_scales, v_minimums, mask);
  TORCH_CHECK(k_codes.sizes() == v_codes.sizes(), "labkit::kv_code_attention: keys and values differ in shape");
  const int64_t batch = q.size(0), heads = q.size(1), d = q.size(3), kv_heads = k_codes.size(1);
  TORCH_CHECK(!rotate || (d & (d - 1)) == 0, "labkit::kv_code_attention: rotate needs a power-of-two head size");
  const Path path = pick(std::string(path_name));
  const int int4 = k_minimums.has_value() ? 1 : 0;
  const int64_t group = heads / kv_heads, keys = mask.size(1);
  const int64_t chunks = std::max<int64_t>(1, (keys + kChunkKeys - 1) / kChunkKeys);
  const at::Tensor queries_in = rotate ? q.clone() : q;  // a rotated kind's query is q H: keys are k H
  if (rotate) rotate_rows(queries_in.data_ptr<float>(), batch * heads, d);
  const float* qp = queries_in.data_ptr<float>();
  std::vector<Partial> partials(batch * kv_heads * chunks);
  at::parallel_for(0, batch * kv_heads * chunks, 1, [&](int64_t begin, int64_t end) {  // (row, KV head, chunk)
    std::vector<float> scores(group * kChunkKeys);
    std::vector<const float*> queries(group);
    const int64_t groups = k_scales.size(3), width = d / groups;
    std::vector<float> qsums(group * groups);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t pair = task / chunks, first = task % chunks * kChunkKeys;
      const int64_t b = pair / kv_heads, kv = pair % kv_heads, n = std::min(kChunkKeys, keys - first);
      for (int64_t j = 0; j < group; ++j) {
        queries[j] = qp + (b * heads + kv * group + j) * d;
        for (int64_t g = 0; g < groups; ++g)
          qsums[j * groups + g] = std::accumulate(queries[j] + g * width, queries[j] + (g + 1) * width, 0.f);
      }
      const Task t{queries.data(), group, n, d, mask.data_ptr<float>() + b * mask.stride(0) + first * mask.stride(1),
                   mask.stride(1), static_cast<float>(scale), qsums.data()};
      Partial& part = partials[task];
      part.top.assign(group, 0.f), part.total.assign(group, 0.f), part.out.assign(group * d, 0.f);
      path.scores[int4](t, rows_of(k_codes, k_scales, k_minimums, b, kv, first, d), scores.data());
      path.softmax(t, scores.data(), part.total.data(), part.top.data());
      path.values[int4](t, scores.data(), rows_of(v_codes, v_scales, v_minimums, b, kv, first, d), part.out.data());
    }
  });
  at::Tensor out = at::empty_like(q);
  float* op = out.data_ptr<float>();
  for (int64_t pair = 0; pair < batch * kv_heads; ++pair)
    merge(&partials[pair * chunks], chunks, group, d, op + pair * group * d);  // pair's heads are contiguous
  if (rotate) rotate_rows(op, batch * heads, d);  // (p (V H)) H = p V
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def(
      "kv_code_attention(Tensor q, Tensor k_codes, Tensor k_scales, Tensor? k_minimums, Tensor v_codes, "
      "Tensor v_scales, Tensor? v_minimums, Tensor mask, float scale, bool rotate=False, str path='auto') -> Tensor");
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) { m.impl("kv_code_attention", kv_code_attention); }
