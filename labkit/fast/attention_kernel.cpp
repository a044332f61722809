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

// q . k[i] for the n keys given (each a pointer to D floats, D a multiple of 16), and sum_i w[i] * v[i], per path
using Dots = void (*)(const float* q, const float* const* k, int64_t n, int64_t d, float* out);
using WeightedSum = void (*)(const float* w, const float* const* v, int64_t n, int64_t d, float total, float* out);

float dot_scalar(const float* a, const float* b, int64_t d) {
  float lane[kLanes] = {};
  for (int64_t c = 0; c < d; c += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = std::fma(a[c + j], b[c + j], lane[j]);
  float half[8], quarter[4];
  for (int j = 0; j < 8; ++j) half[j] = lane[j] + lane[j + 8];
  for (int j = 0; j < 4; ++j) quarter[j] = half[j] + half[j + 4];
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

void dots_scalar(const float* q, const float* const* k, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = dot_scalar(q, k[i], d);
}

void weighted_sum_scalar(const float* w, const float* const* v, int64_t n, int64_t d, float total, float* out) {
  for (int64_t f = 0; f < d; ++f) {
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) sum = std::fma(w[i], v[i][f], sum);
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
__attribute__((target("avx2,fma"))) void dots_avx2(const float* q, const float* const* k, int64_t n, int64_t d,
                                                   float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m256 low[4], high[4];
    for (int j = 0; j < 4; ++j) low[j] = high[j] = _mm256_setzero_ps();
    for (int64_t c = 0; c < d; c += kLanes) {
      const __m256 q_low = _mm256_loadu_ps(q + c), q_high = _mm256_loadu_ps(q + c + 8);
      for (int j = 0; j < 4; ++j) {
        const float* key = k[i + j] + c;
        low[j] = _mm256_fmadd_ps(q_low, _mm256_loadu_ps(key), low[j]);
        high[j] = _mm256_fmadd_ps(q_high, _mm256_loadu_ps(key + 8), high[j]);
      }
    }
    for (int j = 0; j < 4; ++j) out[i + j] = sum8(_mm256_add_ps(low[j], high[j]));
  }
  for (; i < n; ++i) out[i] = dot_avx2(q, k[i], d);
}

// Up to 8 vectors of features at a time (independent chains); each feature still sums its keys in order.
__attribute__((target("avx2,fma"))) void weighted_sum_avx2(const float* w, const float* const* v, int64_t n, int64_t d,
                                                           float total, float* out) {
  for (int64_t first = 0; first < d; first += 64) {
    const int chunks = static_cast<int>(std::min<int64_t>(64, d - first) / 8);
    __m256 sum[8];
    for (int j = 0; j < chunks; ++j) sum[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 weight = _mm256_set1_ps(w[i]);
      const float* value = v[i] + first;
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

__attribute__((target("avx2,fma,avx512f"))) void dots_avx512(const float* q, const float* const* k, int64_t n,
                                                              int64_t d, float* out) {  // as dots_avx2
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m512 acc[4];
    for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += kLanes) {
      const __m512 query = _mm512_loadu_ps(q + c);
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm512_fmadd_ps(query, _mm512_loadu_ps(k[i + j] + c), acc[j]);
    }
    for (int j = 0; j < 4; ++j) {
      const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j]), 1));
      out[i + j] = sum8(_mm256_add_ps(_mm512_castps512_ps256(acc[j]), high));
    }
  }
  for (; i < n; ++i) out[i] = dot_avx512(q, k[i], d);
}

__attribute__((target("avx2,fma,avx512f"))) void weighted_sum_avx512(const float* w, const float* const* v, int64_t n,
                                                                     int64_t d, float total, float* out) {
  for (int64_t first = 0; first < d; first += 64) {  // as weighted_sum_avx2, 4 vectors of 16
    const int chunks = static_cast<int>(std::min<int64_t>(64, d - first) / kLanes);
    __m512 sum[4];
    for (int j = 0; j < chunks; ++j) sum[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m512 weight = _mm512_set1_ps(w[i]);
      const float* value = v[i] + first;
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

// Where one row's key (or value) s of one head lives. row_attention: at past + s * past_stride. The paged op:
// past key s < n_past at past + slots[s] * past_stride (its slot in the pool), key n_past + j of the new tokens
// at fresh + j * fresh_stride. Either way the arithmetic that follows is the same, so are the bits.
struct KeySource {
  const float* past;
  int64_t past_stride;
  const int64_t* slots;  // nullptr: key s is at past + s * past_stride
  int64_t n_past;
  const float* fresh;
  int64_t fresh_stride;

  const float* at(int64_t s) const {
    if (s >= n_past) return fresh + (s - n_past) * fresh_stride;
    return past + (slots ? slots[s] : s) * past_stride;
  }
};

struct Query {                    // one (row, head, token)
  const float* q;                 // [D]
  const float* mask;              // key s's additive mask at mask[s * mask_stride]
  int64_t mask_stride;
  const std::vector<int64_t>& visible;  // visible_keys of its mask row
};

struct Scratch {  // one thread's buffers, reused from query to query
  std::vector<float> weight;
  std::vector<const float*> keys, values;  // the visible keys and values of one key/value head, in order

  void point_at(const KeySource& k, const KeySource& v, const std::vector<int64_t>& visible) {
    keys.resize(visible.size());
    values.resize(visible.size());
    for (size_t i = 0; i < visible.size(); ++i) {
      keys[i] = k.at(visible[i]);
      values[i] = v.at(visible[i]);
    }
  }
};

// One query's output [D] into out, in the fixed order of the file's comment, over the keys and values
// scratch points at (its key/value head's).
void attend_one(const Path& path, const Query& query, int64_t d, float scale, float* out, Scratch& scratch) {
  const std::vector<int64_t>& visible = query.visible;
  const int64_t n = static_cast<int64_t>(visible.size());
  if (n == 0) {  // a query that sees no key (never in the engine's layouts): zeros, not NaN
    std::fill(out, out + d, 0.f);
    return;
  }
  scratch.weight.resize(n);
  float* weight = scratch.weight.data();
  path.dots(query.q, scratch.keys.data(), n, d, weight);
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    weight[i] = weight[i] * scale + query.mask[visible[i] * query.mask_stride];
    top = std::max(top, weight[i]);
  }
  float total = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    weight[i] = std::exp(weight[i] - top);
    total += weight[i];
  }
  path.weighted_sum(weight, scratch.values.data(), n, d, total, out);
}

// Every query of q [B, H, T, D] against its row's keys (sources(b, kv head) -> {keys, values}), out [B, H, T, D];
// mask [B, 1, T, S] over the S keys each row has. A task is one (row, token), its heads one after another.
template <typename Sources>
at::Tensor attend_all(const at::Tensor& q, const at::Tensor& mask, int64_t kv_heads, double scale,
                      const std::string& path_name, Sources sources) {
  const Path& path = pick(path_name);
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), d = q.size(3), keys = mask.size(3);
  const int64_t group = heads / kv_heads;
  at::Tensor out = at::empty({batch, heads, tokens, d}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* mp = mask.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, kTaskFloats / std::max<int64_t>(1, 2 * keys * d * heads));
  at::parallel_for(0, batch * tokens, grain, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    std::vector<int64_t> visible;
    visible.reserve(keys);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / tokens, t = task % tokens;
      const float* mask_row = mp + b * mask.stride(0) + t * mask.stride(2);
      visible_keys(mask_row, mask.stride(3), keys, visible);
      for (int64_t kv = 0; kv < kv_heads; ++kv) {  // its keys found once, for the query heads that share them
        const auto [key, value] = sources(b, kv);
        scratch.point_at(key, value, visible);
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
          const Query query{qp + b * q.stride(0) + h * q.stride(1) + t * q.stride(2), mask_row, mask.stride(3),
                            visible};
          attend_one(path, query, d, static_cast<float>(scale), op + ((b * heads + h) * tokens + t) * d, scratch);
        }
      }
    }
  });
  return out;
}

constexpr const char* kOp = "labkit::row_attention";
constexpr const char* kPagedOp = "labkit::paged_row_attention";

void check_float(const char* op, std::initializer_list<const at::Tensor*> tensors, int64_t dim, const char* what) {
  for (const at::Tensor* t : tensors)
    TORCH_CHECK(t->dim() == dim && t->device().is_cpu() && t->scalar_type() == at::kFloat && t->stride(-1) == 1, op,
                ": ", what, " must be ", dim, "-d float32 CPU tensors, contiguous in D");
}

void check_query_and_mask(const char* op, const at::Tensor& q, const at::Tensor& mask, int64_t kv_heads,
                          int64_t keys) {
  TORCH_CHECK(mask.dim() == 4 && mask.device().is_cpu() && mask.scalar_type() == at::kFloat, op,
              ": mask must be a 4-d float32 CPU tensor");
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  TORCH_CHECK(d % kLanes == 0, op, ": head_dim ", d, " must be a multiple of ", kLanes);
  TORCH_CHECK(h % kv_heads == 0, op, ": q's ", h, " heads must be a multiple of the keys' ", kv_heads);
  TORCH_CHECK(mask.size(0) == b && mask.size(1) == 1 && mask.size(2) == t && mask.size(3) == keys, op,
              ": mask must be [B, 1, T, S] with S = ", keys, " keys (expand a broadcast one)");
}

at::Tensor row_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                         double scale, c10::string_view path_name) {
  check_float(kOp, {&q, &k, &v}, 4, "q, k and v");
  TORCH_CHECK(k.size(0) == q.size(0) && v.sizes() == k.sizes() && k.size(3) == q.size(3), kOp,
              ": k, v must be [B, H_kv, S, D] with H a multiple of H_kv, q [B, H, T, D]");
  check_query_and_mask(kOp, q, mask, k.size(1), k.size(2));
  const float *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const int64_t keys = k.size(2);
  return attend_all(q, mask, k.size(1), scale, std::string(path_name), [&](int64_t b, int64_t kv) {
    return std::pair{KeySource{kp + b * k.stride(0) + kv * k.stride(1), k.stride(2), nullptr, keys, nullptr, 0},
                     KeySource{vp + b * v.stride(0) + kv * v.stride(1), v.stride(2), nullptr, keys, nullptr, 0}};
  });
}

// q [B, H, W, D] attends to each row's S past keys, read in place from one layer's pool k_pool, v_pool
// [H_kv, slots, D] at read_slots [B, S], then to its W new keys k_new, v_new [B, H_kv, W, D]; mask
// [B, 1, W, S + W]. The same bits as row_attention on the gathered keys with the new ones appended, without
// copying the past: a compiled decode step's gather wrote and read every layer's keys once more.
at::Tensor paged_row_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                               const at::Tensor& read_slots, const at::Tensor& k_new, const at::Tensor& v_new,
                               const at::Tensor& mask, double scale, c10::string_view path_name) {
  check_float(kPagedOp, {&q, &k_new, &v_new}, 4, "q, k_new and v_new");
  check_float(kPagedOp, {&k_pool, &v_pool}, 3, "k_pool and v_pool");
  TORCH_CHECK(read_slots.dim() == 2 && read_slots.scalar_type() == at::kLong && read_slots.is_contiguous() &&
                  read_slots.size(0) == q.size(0),
              kPagedOp, ": read_slots must be a contiguous int64 [B, S] tensor, B = q's rows");
  TORCH_CHECK(v_pool.sizes() == k_pool.sizes() && k_pool.size(2) == q.size(3) && v_new.sizes() == k_new.sizes() &&
                  k_new.size(0) == q.size(0) && k_new.size(1) == k_pool.size(0) && k_new.size(2) == q.size(2) &&
                  k_new.size(3) == q.size(3),
              kPagedOp, ": k_pool, v_pool must be [H_kv, slots, D] and k_new, v_new [B, H_kv, W, D], q [B, H, W, D]");
  const int64_t past = read_slots.size(1), slots = k_pool.size(1);
  const int64_t* sp = read_slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < read_slots.numel(); ++i)
    TORCH_CHECK(sp[i] >= 0 && sp[i] < slots, kPagedOp, ": read slot ", sp[i], " is outside the pool's ", slots);
  check_query_and_mask(kPagedOp, q, mask, k_pool.size(0), past + q.size(2));
  const float *kp = k_pool.data_ptr<float>(), *vp = v_pool.data_ptr<float>();
  const float *kn = k_new.data_ptr<float>(), *vn = v_new.data_ptr<float>();
  return attend_all(q, mask, k_pool.size(0), scale, std::string(path_name), [&](int64_t b, int64_t kv) {
    const int64_t* row_slots = sp + b * past;
    return std::pair{KeySource{kp + kv * k_pool.stride(0), k_pool.stride(1), row_slots, past,
                               kn + b * k_new.stride(0) + kv * k_new.stride(1), k_new.stride(2)},
                     KeySource{vp + kv * v_pool.stride(0), v_pool.stride(1), row_slots, past,
                               vn + b * v_new.stride(0) + kv * v_new.stride(1), v_new.stride(2)}};
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def("row_attention(Tensor q, Tensor k, Tensor v, Tensor mask, float scale, str path='auto') -> Tensor");
  m.def(
      "paged_row_attention(Tensor q, Tensor k_pool, Tensor v_pool, Tensor read_slots, Tensor k_new, Tensor v_new, "
      "Tensor mask, float scale, str path='auto') -> Tensor");
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) {
  m.impl("row_attention", row_attention);
  m.impl("paged_row_attention", paged_row_attention);
}
