// Activations for labkit's integer kernels (q4_kernel.cpp, q4_repack_kernel.cpp): each row of x [M, K]
// rounded per group of 32 inputs to int8, as llama.cpp's Q8_1:
//     dx = absmax / 127,  qx = rint(x * 127 / absmax),  s = dx * sum(qx)
// The same bits on every path and CPU: only IEEE float32 multiplies and divides, and round-half-even.

#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace labkit_q8 {

constexpr int64_t kGroup = 32;  // inputs per group, as in GGUF's Q4_1, Q8_0 and Q8_1

struct Q8Rows {           // x quantized: per row i and group g
  std::vector<int8_t> q;  // [M, K] codes
  std::vector<float> d;   // [M, G] scale dx
  std::vector<float> s;   // [M, G] dx * sum of the group's codes
};

struct ActRow {      // one activation row i, quantized
  const int8_t* qx;  // [K]
  const float* dx;   // [G]
  const float* sx;   // [G]
};

// Whether this CPU runs a kernel path: "scalar" always, "avx2" with AVX2 and FMA, "avx512" with AVX-512
// F, BW and VNNI.
inline bool cpu_runs(const std::string& path) {
  if (path == "scalar") return true;
#if defined(__x86_64__)
  if (path == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (path == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
#endif
  return false;
}

// One group of 32 values -> its 32 codes, dx and s. The SIMD forms give the scalar one's bits: the
// absmax is exact in any order, the conversion rounds half to even as nearbyint does (MXCSR's default),
// and the codes' sum is an integer.
inline void quantize_group_scalar(const float* v, int8_t* q, float* dx, float* s) {
  float amax = 0.f;
  for (int64_t j = 0; j < kGroup; ++j) amax = std::fmax(amax, std::fabs(v[j]));
  const float inverse = amax > 0.f ? 127.f / amax : 0.f;
  int32_t sum = 0;
  for (int64_t j = 0; j < kGroup; ++j) {
    const int32_t code = static_cast<int32_t>(std::nearbyint(v[j] * inverse));  // half to even, like torch.round
    q[j] = static_cast<int8_t>(code);
    sum += code;
  }
  *dx = amax / 127.f;
  *s = *dx * static_cast<float>(sum);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) inline void quantize_group_avx2(const float* v, int8_t* q, float* dx,
                                                                          float* s) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 x[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) x[i] = _mm256_loadu_ps(v + 8 * i), amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, x[i]));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  const float absmax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  const __m256 inverse = _mm256_set1_ps(absmax > 0.f ? 127.f / absmax : 0.f);
  __m256i c[4], sum = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(x[i], inverse)), sum = _mm256_add_epi32(sum, c[i]);
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  *dx = absmax / 127.f;
  *s = *dx * static_cast<float>(_mm_cvtsi128_si32(t));
}

__attribute__((target("avx2,fma,f16c,avx512f,avx512bw"))) inline void quantize_group_avx512(const float* v, int8_t* q,
                                                                                            float* dx, float* s) {
  const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
  const float absmax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const __m512 inverse = _mm512_set1_ps(absmax > 0.f ? 127.f / absmax : 0.f);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inverse)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inverse));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(qb));
  *dx = absmax / 127.f;
  *s = *dx * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
}
#endif

// x [rows, K] float32 -> Q8_1 on a kernel path ("auto": the fastest this CPU runs; all give the same bits),
// the groups in parallel
inline Q8Rows quantize_q8_1(const float* x, int64_t rows, int64_t k, const std::string& path = "auto") {
  const int64_t groups = rows * (k / kGroup);
  Q8Rows out{std::vector<int8_t>(rows * k), std::vector<float>(groups), std::vector<float>(groups)};
  auto group = quantize_group_scalar;
#if defined(__x86_64__)
  if (path == "avx2" || (path == "auto" && cpu_runs("avx2"))) group = quantize_group_avx2;
  if (path == "avx512" || (path == "auto" && cpu_runs("avx512"))) group = quantize_group_avx512;
#endif
  at::parallel_for(0, groups, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) group(x + g * kGroup, out.q.data() + g * kGroup, &out.d[g], &out.s[g]);
  });
  return out;
}

inline ActRow act_row(const Q8Rows& act, int64_t i, int64_t k) {
  const int64_t groups = k / kGroup;
  return {act.q.data() + i * k, act.d.data() + i * groups, act.s.data() + i * groups};
}

inline float half_to_float(uint16_t bits) { return c10::detail::fp16_ieee_to_fp32_value(bits); }

constexpr int64_t kTaskWeights = 1 << 17;  // weights per thread before a second one is worth waking

// The path called `name` among `paths` (each with a `name`, slowest first), or the fastest this CPU runs
// for "auto"; a path this CPU cannot run is refused with the ones it can.
template <typename Path, size_t N>
const Path& pick_path(const Path (&paths)[N], const std::string& name) {
  const Path* best = nullptr;
  std::string runs = "auto";
  for (const Path& p : paths) {
    if (!cpu_runs(p.name)) continue;
    if (p.name == name) return p;
    best = &p;
    runs += std::string(",") + p.name;
  }
  TORCH_CHECK(name == "auto", "labkit: kernel path '", name, "' is not available on this CPU; choose one of: ", runs);
  return *best;
}

inline void check_x(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.dim() == 2 && x.device().is_cpu(), op, ": x must be a 2-d CPU tensor [M, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf,
              op, ": x must be float32, bfloat16 or float16, got ", x.scalar_type());
  TORCH_CHECK(x.size(1) % kGroup == 0, op, ": K = ", x.size(1), " must be a multiple of ", kGroup);
}

}  // namespace labkit_q8
