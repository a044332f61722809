// Quantizing a decode step's new keys or values straight into a quantized KV cache, registered as the op
// labkit::kv_code_write (labkit.fast.code_attention's CodeReadingKVCache calls it for a one-token step).
//
// The same codes, scales and minimums as labkit.quant.quantized_kv's QuantizedRows.write, which runs
// labkit.quant.schemes' quantize_groupwise in a dozen small torch operations per call (60 calls a step for
// SmolLM2: keys and values of 30 layers, about 6-11 ms of a decode step on 2 cores). Here one call per
// tensor quantizes every row of x [B, H, T, D] into positions start..start+T:
//   int8 (no minimums): one group per row;  s = absmax / 127 in float16, rounded up;
//                       code = clamp(round(x / s), -127, 127) + 128
//   int4 (minimums):    groups of D / G;     m = min in float16, rounded down; s = (max - m) / 15, rounded up;
//                       code = clamp(round((x - m) / s), 0, 15), element 2i in byte i's low nibble
// (a zero scale becomes 1, round is to nearest even), as quantize_groupwise does them, in float32.
// rotate: the row is first multiplied by the normalized Hadamard matrix H [D, D] in float64 and rounded once
// to float32, as QuantizedRows.write does (a Walsh-Hadamard transform here, a matmul there: the same float32
// row but for a float64 sum's last bit, so the codes agree except at an exact rounding tie).

#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

c10::Half half_from_bits(uint16_t bits) { return c10::Half(bits, c10::Half::from_bits()); }

// v stored in float16, one step up where rounding made it smaller (schemes.round_scale_up).
c10::Half round_up(float v) {
  const c10::Half h(v);
  if (!(float(h) < v)) return h;
  const uint16_t bits = h.x;
  if ((bits & 0x7FFF) == 0) return half_from_bits(0x0001);  // +-0 -> the smallest positive subnormal
  return half_from_bits((bits & 0x8000) ? bits - 1 : bits + 1);
}

// v stored in float16, one step down where rounding made it larger (schemes._round_down).
c10::Half round_down(float v) {
  const c10::Half h(v);
  if (!(float(h) > v)) return h;
  const uint16_t bits = h.x;
  if ((bits & 0x7FFF) == 0) return half_from_bits(0x8001);  // +-0 -> the smallest negative subnormal
  return half_from_bits((bits & 0x8000) ? bits + 1 : bits - 1);
}

// x H in float64 (H: Sylvester's Hadamard matrix times its float32 entry 1 / sqrt(d)), rounded to float32.
void rotate_row(const float* x, int64_t d, float* out) {
  std::vector<double> w(x, x + d);
  for (int64_t half = 1; half < d; half *= 2)
    for (int64_t i = 0; i < d; i += 2 * half)
      for (int64_t j = i; j < i + half; ++j) {
        const double a = w[j], b = w[j + half];
        w[j] = a + b;
        w[j + half] = a - b;
      }
  const double entry = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t j = 0; j < d; ++j) out[j] = static_cast<float>(w[j] * entry);
}

void quantize_int8_group(const float* x, int64_t n, uint8_t* codes, c10::Half* scale) {
  float top = 0.f;
  for (int64_t j = 0; j < n; ++j) top = std::max(top, std::fabs(x[j]));
  c10::Half s = round_up(top / 127.f);
  if (!(float(s) > 0.f)) s = c10::Half(1.f);
  const float step = float(s);
  for (int64_t j = 0; j < n; ++j)
    codes[j] = static_cast<uint8_t>(std::clamp(std::nearbyint(x[j] / step), -127.f, 127.f) + 128.f);
  *scale = s;
}

void quantize_int4_group(const float* x, int64_t n, uint8_t* packed, c10::Half* scale, c10::Half* minimum) {
  float low = x[0], high = x[0];
  for (int64_t j = 1; j < n; ++j) low = std::min(low, x[j]), high = std::max(high, x[j]);
  const c10::Half m = round_down(low);
  c10::Half s = round_up((high - float(m)) / 15.f);
  if (!(float(s) > 0.f)) s = c10::Half(1.f);
  const float floor_value = float(m), step = float(s);
  for (int64_t j = 0; j < n; j += 2) {
    const auto code = [&](int64_t i) {
      return static_cast<uint8_t>(std::clamp(std::nearbyint((x[i] - floor_value) / step), 0.f, 15.f));
    };
    packed[j / 2] = static_cast<uint8_t>(code(j) | (code(j + 1) << 4));
  }
  *scale = s;
  *minimum = m;
}

void kv_code_write(const at::Tensor& x, at::Tensor codes, at::Tensor scales, const c10::optional<at::Tensor>& minimums,
                   int64_t start, bool rotate) {
  const char* op = "labkit::kv_code_write";
  TORCH_CHECK(x.dim() == 4 && x.scalar_type() == at::kFloat && x.is_contiguous(), op,
              ": x must be a contiguous float32 [B, H, T, D]");
  const int64_t batch = x.size(0), heads = x.size(1), tokens = x.size(2), d = x.size(3);
  const bool int4 = minimums.has_value();
  TORCH_CHECK(codes.dim() == 4 && codes.scalar_type() == at::kByte && codes.size(0) == batch &&
                  codes.size(1) == heads && codes.size(3) == (int4 ? d / 2 : d) && codes.stride(3) == 1,
              op, ": codes must be uint8 [B, H, S, D] (int8) or [B, H, S, D / 2] (int4)");
  TORCH_CHECK(start >= 0 && start + tokens <= codes.size(2), op, ": positions ", start, "..", start + tokens,
              " do not fit the cache's ", codes.size(2));
  const at::Tensor* parts[] = {&scales, int4 ? &*minimums : &scales};
  for (const at::Tensor* t : parts)
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->dim() == 4 && t->stride(3) == 1 &&
                    t->sizes().slice(0, 3) == codes.sizes().slice(0, 3) && d % t->size(3) == 0 &&
                    (!int4 || (d / t->size(3)) % 2 == 0),
                op, ": scales and minimums must be float16 [B, H, S, groups]");
  TORCH_CHECK(!rotate || (d > 0 && (d & (d - 1)) == 0), op, ": rotate needs a head size that is a power of two");
  const int64_t groups = scales.size(3), group = d / groups;
  std::vector<float> rotated(d);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < tokens; ++t) {
        const float* row = x.data_ptr<float>() + ((b * heads + h) * tokens + t) * d;
        if (rotate) row = (rotate_row(row, d, rotated.data()), rotated.data());
        const int64_t s = start + t;
        uint8_t* c = codes.data_ptr<uint8_t>() + b * codes.stride(0) + h * codes.stride(1) + s * codes.stride(2);
        c10::Half* sc = scales.data_ptr<c10::Half>() + b * scales.stride(0) + h * scales.stride(1) + s * scales.stride(2);
        for (int64_t g = 0; g < groups; ++g) {
          if (!int4) {
            quantize_int8_group(row + g * group, group, c + g * group, sc + g);
            continue;
          }
          const at::Tensor& m = *minimums;
          c10::Half* mn = m.data_ptr<c10::Half>() + b * m.stride(0) + h * m.stride(1) + s * m.stride(2);
          quantize_int4_group(row + g * group, group, c + g * group / 2, sc + g, mn + g);
        }
      }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(labkit, m) {
  m.def("kv_code_write(Tensor x, Tensor(a!) codes, Tensor(b!) scales, Tensor(c!)? minimums, int start, bool rotate) -> ()");
}

TORCH_LIBRARY_IMPL(labkit, CPU, m) { m.impl("kv_code_write", kv_code_write); }
