// Overflow-checked integer arithmetic for sizes and byte counts: every product of user-given sizes
// in dtsim goes through these, so a huge shape is refused with a clear error instead of wrapping
// into a negative byte count.
//
// Example: CheckedMul(int64_t{1} << 62, 8) is nullopt; MulOrThrow({2305843009213693952, 8},
// "shape", "bytes of one rank's buffer") throws InputError("shape", "bytes of one rank's buffer:
// 2305843009213693952 × 8 overflows 64-bit integers (more than 9223372036854775807)").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace dtsim {

// a * b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// ceil(a / b) for a >= 0, b >= 1, without the overflow of (a + b - 1) / b.
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The product of `factors`; throws InputError(field, "<what>: <a> × <b> × ... overflows 64-bit
// integers ...") when it does not fit in int64_t.
int64_t MulOrThrow(const std::vector<int64_t>& factors, const std::string& field,
                   const std::string& what);
inline int64_t MulOrThrow(std::initializer_list<int64_t> factors, const std::string& field,
                          const std::string& what) {
  return MulOrThrow(std::vector<int64_t>(factors), field, what);
}

}  // namespace dtsim
