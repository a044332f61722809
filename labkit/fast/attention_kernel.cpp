// labkit's batch-invariant attention (the serving engine's), registered as the op labkit::row_attention.
//
// For each query (row b, head h, token t), over the keys s its mask leaves visible (mask > -inf), in order:
//     score_s = (q . k_s) * scale + mask_s,   p_s = exp(score_s - max) / sum exp(score - max),
//     out = sum_s p_s v_s
// with grouped-query heads: query head h reads key/value head h / (H / H_kv).
//
// torch's fused attention sums over the key axis in blocks whose size and alignment follow S, the padded
// or packed length, so one row's output moves in its last bits with the rows beside it. Those bits are
// enough to move an int8 step of labkit's Q8_1 activations and, some layers later, a greedy token. Here
// each query's sums run in one fixed order over its own visible keys (a task is one row's token, its heads
// one after another): the output is the same bits alone, right-padded beside longer rows, packed end to end
// with other prompts, or fed in chunks.
//
//   - q . k: 16 lanes, lane j summing features j, j + 16, ... with fused multiply-adds, then the lanes as
//     ((0+8) + (4+12) ...): the AVX2 path keeps the 16 lanes in two registers, the scalar path in an array,
//     so all three paths give the same bits (tested, tests/fast/test_row_attention.py).
//   - softmax: the largest visible score, then exp and their sum one key after another, in float32.
//   - p v: each output feature sums its keys one after another with fused multiply-adds, then is divided.
//
// Three paths, chosen at run time as the Q4_1 kernel's are: AVX-512, AVX2 and scalar.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define LABKIT_X86 1
#endif

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kTaskFloats = 1 << 15;  // multiply-adds per thread before a second one is worth waking

struct Keys {          // one key/value head of one row: key s at data + s * stride
  const float* data;
  int64_t stride;
};

// q . k_rows[i] for the n rows given, over d features (a multiple of 16), and sum_i w[i] * v_rows[i], per path
using Dots = void (*)(const float* q, Keys k, const int64_t* rows, int64_t n, int64_t d, float* out);
using WeightedSum = void (*)(const float* w, const int64_t* rows, int64_t n, Keys v, int64_t d, float total,
                             float* out);

float dot_scalar(const float* a, const float* b, int64_t d) {
  float lane[kLanes] = {};
  for (int64_t c = 0; c < d; c += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = std::fma(a[c + j], b[c + j], lane[j]);
  float half[8], quarter[4];
  for (int j = 0; j < 8; ++j) half[j] = lane[j] + lane[j + 8];
  for (int j = 0; j < 4; ++j) quarter[j] = half[j] + half[j + 4];
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

void dots_scalar(const float* q, Keys k, const int64_t* rows, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = dot_scalar(q, k.data + rows[i] * k.stride, d);
}

void weighted_sum_scalar(const float* w, const int64_t* rows, int64_t n, Keys v, int64_t d, float total,
                         float* out) {
  for (int64_t f = 0; f < d; ++f) {
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) sum = std::fma(w[i], v.data[rows[i] * v.stride + f], sum);
    out[f] = sum / total;
  }
}

#ifdef LABKIT_X86

__attribute__((target("avx2,fma"), always_inline)) inline float sum8(__m256 v) {  // (0+4) + (2+6) ... as above
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t d) {
  __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();  // lanes 0-7 and 8-15
  for (int64_t c = 0; c < d; c += kLanes) {
    low = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c), low);
    high = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 8), _mm256_loadu_ps(b + c + 8), high);
  }
  return sum8(_mm256_add_ps(low, high));
}

// Four keys at a time: four independent chains instead of one waiting on each multiply-add; each key's
// own sum is the same as dot_avx2's.
__attribute__((target("avx2,fma"))) void dots_avx2(const float* q, Keys k, const int64_t* rows, int64_t n, int64_t d,
                                                   float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m256 low[4], high[4];
    for (int j = 0; j < 4; ++j) low[j] = high[j] = _mm256_setzero_ps();
    for (int64_t c = 0; c < d; c += kLanes) {
      const __m256 q_low = _mm256_loadu_ps(q + c), q_high = _mm256_loadu_ps(q + c + 8);
      for (int j = 0; j < 4; ++j) {
        const float* key = k.data + rows[i + j] * k.stride + c;
        low[j] = _mm256_fmadd_ps(q_low, _mm256_loadu_ps(key), low[j]);
        high[j] = _mm256_fmadd_ps(q_high, _mm256_loadu_ps(key + 8), high[j]);
      }
    }
    for (int j = 0; j < 4; ++j) out[i + j] = sum8(_mm256_add_ps(low[j], high[j]));
  }
  for (; i < n; ++i) out[i] = dot_avx2(q, k.data + rows[i] * k.stride, d);
}

// Up to 8 vectors of features at a time (independent chains); each feature still sums its keys in order.
__attribute__((target("avx2,fma"))) void weighted_sum_avx2(const float* w, const int64_t* rows, int64_t n, Keys v,
                                                           int64_t d, float total, float* out) {
  for (int64_t first = 0; first < d; first += 64) {
    const int chunks = static_cast<int>(std::min<int64_t>(64, d - first) / 8);
    __m256 sum[8];
    for (int j = 0; j < chunks; ++j) sum[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 weight = _mm256_set1_ps(w[i]);
      const float* value = v.data + rows[i] * v.stride + first;
      for (int j = 0; j < chunks; ++j) sum[j] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(value + 8 * j), sum[j]);
    }
    for (int j = 0; j < chunks; ++j)
      _mm256_storeu_ps(out + first + 8 * j, _mm256_div_ps(sum[j], _mm256_set1_ps(total)));
  }
}

__attribute__((target("avx2,fma,avx512f"))) float dot_avx512(const float* a, const float* b, int64_t d) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c += kLanes) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c), acc);
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return sum8(_mm256_add_ps(_mm512_castps512_ps256(acc), high));
}

__attribute__((target("avx2,fma,avx512f"))) void dots_avx512(const float* q, Keys k, const int64_t* rows, int64_t n,
                                                              int64_t d, float* out) {  // as dots_avx2
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m512 acc[4];
    for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += kLanes) {
      const __m512 query = _mm512_loadu_ps(q + c);
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm512_fmadd_ps(query, _mm512_loadu_ps(k.data + rows[i + j] * k.stride + c), acc[j]);
    }
    for (int j = 0; j < 4; ++j) {
      const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j]), 1));
      out[i + j] = sum8(_mm256_add_ps(_mm512_castps512_ps256(acc[j]), high));
    }
  }
  for (; i < n; ++i) out[i] = dot_avx512(q, k.data + rows[i] * k.stride, d);
}

__attribute__((target("avx2,fma,avx512f"))) void weighted_sum_avx512(const float* w, const int64_t* rows, int64_t n,
                                                                     Keys v, int64_t d, float total, float* out) {
  for (int64_t first = 0; first < d; first += 64) {  // as weighted_sum_avx2, 4 vectors of 16
    const int chunks = static_cast<int>(std::min<int64_t>(64, d - first) / kLanes);
    __m512 sum[4];
    for (int j = 0; j < chunks; ++j) sum[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m512 weight = _mm512_set1_ps(w[i]);
      const float* value = v.data + rows[i] * v.stride + first;
      for (int j = 0; j < chunks; ++j)
        sum[j] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(value + kLanes * j), sum[j]);
    }
    for (int j = 0; j < chunks; ++j)
      _mm512_storeu_ps(out + first + kLanes * j, _mm512_div_ps(sum[j], _mm512_set1_ps(total)));
  }
}

#endif  // LABKIT_X86

struct Path {
  const char* name;
  Dots dots;
  WeightedSum weighted_sum;
  bool (*supported)();
};

const Path& pick(const std::string& name) {  // the named path, or the fastest this CPU runs for "auto"
  static const std::vector<Path> paths = {
      {"scalar", dots_scalar, weighted_sum_scalar, [] { return true; }},
#ifdef LABKIT_X86
      {"avx2", dots_avx2, weighted_sum_avx2,
       [] { return bool(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")); }},
      {"avx512", dots_avx512, weighted_sum_avx512, [] { return bool(__builtin_cpu_supports("avx512f")); }},
#endif
  };
  const Path* best = nullptr;
  for (const Path& p : paths) {
    if (!p.supported()) continue;
    if (p.name == name) return p;
    best = &p;
  }
  TORCH_CHECK(name == "auto", "labkit::row_attention: path '", name, "' is not available on this CPU");
  return *best;
}

// The keys a query's mask leaves visible (mask > -inf), in order: found once per (row, token) and shared by
// its heads, since the mask [B, 1, T, S] has no head axis (a packed prefill's mask row is mostly -inf).
void visible_keys(const float* mask, int64_t stride, int64_t keys, std::vector<int64_t>& visible) {
  visible.clear();
  for (int64_t s = 0; s < keys; ++s)
    if (mask[s * stride] != -std::numeric_limits<float>::infinity()) visible.push_back(s);
}

struct Query {                    // one (row, head, token)
  const float* q;                 // [D]
  const float* mask;              // key s's additive mask at mask[s * mask_stride]
  int64_t mask_stride;
  const std::vector<int64_t>& visible;  // visible_keys of its mask row
};

// One query's output [D] into out, in the fixed order of the file's comment.
void attend_one(const Path& path, const Query& query, Keys k, Keys v, int64_t d, float scale, float* out,
                std::vector<float>& weight) {
  const std::vector<int64_t>& visible = query.visible;
  const int64_t n = static_cast<int64_t>(visible.size());
  weight.resize(n);
  path.dots(query.q, k, visible.data(), n, d, weight.data());
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    weight[i] = weight[i] * scale + query.mask[visible[i] * query.mask_stride];
    top = std::max(top, weight[i]);
  }
  if (visible.empty()) {  // a query that sees no key (never in the engine's layouts): zeros, not NaN
    std::fill(out, out + d, 0.f);
    return;
  }
  float total = 0.f;
  for (float& w : weight) {
    w = std::exp(w - top);
    total += w;
  }
  path.weighted_sum(weight.data(), visible.data(), n, v, d, total, out);
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  const char* op = "labkit::row_attention";
  for (const at::Tensor* t : {&q, &k, &v, &mask})
    TORCH_CHECK(t->dim() == 4 && t->device().is_cpu() && t->scalar_type() == at::kFloat, op,
                ": q, k, v and mask must be 4-d float32 CPU tensors");
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), s = k.size(2);
  TORCH_CHECK(d % kLanes == 0, op, ": head_dim ", d, " must be a multiple of ", kLanes);
  TORCH_CHECK(k.size(0) == b && v.sizes() == k.sizes() && k.size(3) == d && h % k.size(1) == 0, op,
              ": k, v must be [B, H_kv, S, D] with H a multiple of H_kv, q [B, H, T, D]");
  TORCH_CHECK(mask.size(0) == b && mask.size(1) == 1 && mask.size(2) == t && mask.size(3) == s, op,
              ": mask must be [B, 1, T, S] (expand a broadcast one)");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, op, ": q, k, v must be contiguous in D");
}

at::Tensor row_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                         double scale, c10::string_view path_name) {
  check_inputs(q, k, v, mask);
  const Path& path = pick(std::string(path_name));
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), d = q.size(3), keys = k.size(2);
  const int64_t group = heads / k.size(1);
  at::Tensor out = at::empty({batch, heads, tokens, d}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float* mp = mask.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, kTaskFloats / std::max<int64_t>(1, 2 * keys * d * heads));
  at::parallel_for(0, batch * tokens, grain, [&](int64_t begin, int64_t end) {  // a task: one (row, token)
    std::vector<float> weight;
    std::vector<int64_t> visible;
    weight.reserve(keys);
    visible.reserve(keys);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / tokens, t = task % tokens;
      const float* mask_row = mp + b * mask.stride(0) + t * mask.stride(2);
      visible_keys(mask_row, mask.stride(3), keys, visible);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kv = h / group;
        const Query query{qp + b * q.stride(0) + h * q.stride(1) + t * q.stride(2), mask_row, mask.stride(3),
                          visible};
        const Keys key{kp + b * k.stride(0) + kv * k.stride(1), k.stride(2)};
        const Keys value{vp + b * v.stride(0) + kv * v.stride(1), v.stride(2)};
        attend_one(path, query, key, value, d, static_cast<float>(scale), op + ((b * heads + h) * tokens + t) * d,
                   weight);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def("row_attention(Tensor q, Tensor k, Tensor v, Tensor mask, float scale, str path='auto') -> Tensor");
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) { m.impl("row_attention", row_attention); }
