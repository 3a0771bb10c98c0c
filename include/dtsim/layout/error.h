// Error types of dtsim: one small hierarchy for bad user input, separate from internal invariants.
//
// Policy (see docs/architecture.md#error-policy):
//   * Bad user input (a placement that does not parse, a shard dim out of range, a mesh that does
//   not match the
//     world) throws `dtsim::InputError` whose message names the field and the offending value, e.g.
//       placements: 'S(3)' shards dim 3 but the tensor has 2 dims
//     The command line prints it as `dtsim: error: <message>` and exits with code 2.
//   * A broken internal invariant is a bug: `DTSIM_CHECK` throws `dtsim::InternalError` (exit code
//   3).
//   * "Does not apply" is `std::optional`, never an exception: `FindX` returns optional, `GetX`
//   throws.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dtsim {

// Base of every error dtsim throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user gave something invalid. `field()` is the name the user typed (an option like
// "placements", or a JSON key); `what()` is "<field>: <message>".
class InputError : public Error {
 public:
  InputError(std::string field, const std::string& message)
      : Error(field + ": " + message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// A dtsim invariant does not hold: a bug in dtsim, never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace internal {
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void ThrowInternal(const char* file, int line, const char* condition,
                                const std::string& message);
}  // namespace internal

// Builds "a" "b" 3 into one string with operator<<.
using internal::StrCat;

}  // namespace dtsim

// Checks an internal invariant; on failure throws dtsim::InternalError naming the file, line and
// condition.
#define DTSIM_CHECK(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      ::dtsim::internal::ThrowInternal(__FILE__, __LINE__, #cond,           \
                                       ::dtsim::StrCat("", ##__VA_ARGS__)); \
    }                                                                       \
  } while (0)
