// Helpers shared by the fuzz targets (tests/fuzz/README.md): splitting an input into parts, the
// small case limits that keep every input fast, and the failure report (a finding is an abort with
// the reason on stderr).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim::fuzz {

// Reports a finding and aborts (libFuzzer then saves the input as crash-<sha1>).
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "dtsim fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define DTSIM_FUZZ_EXPECT(cond, ...)                                               \
  do {                                                                             \
    if (!(cond)) ::dtsim::fuzz::Fail(::dtsim::StrCat(#cond, ": ", ##__VA_ARGS__)); \
  } while (0)

// The input as text.
inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits `text` at every `sep` into at most `max_parts` parts (the last part keeps any further
// separators).
inline std::vector<std::string> SplitParts(std::string_view text, char sep, size_t max_parts) {
  std::vector<std::string> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = text.find(sep);
    if (at == std::string_view::npos) break;
    parts.emplace_back(text.substr(0, at));
    text.remove_prefix(at + 1);
  }
  parts.emplace_back(text);
  return parts;
}

// Limits that keep one input well under a second under the sanitizers: small worlds and tensors.
// Inputs beyond them get the same clear InputError the command line gives beyond its own (larger)
// limits.
inline cli::CaseLimits FuzzLimits() {
  cli::CaseLimits limits;
  limits.max_ranks = 256;
  limits.max_simulated_ranks = 16;
  limits.max_simulation_bytes = int64_t{8} << 20;
  limits.write_files =
      false;  // a line's "trace" path is checked and the trace recorded, never written
  return limits;
}

// Runs each line of the input (at most 4) as a batch line of `run`: the answer must be a JSON
// object that dtsim can print, either the command's result or {"error", "field", "line"}, never an
// internal error.
inline void CheckBatchInput(const uint8_t* data, size_t size, const cli::BatchCase& run) {
  const std::vector<std::string> lines = SplitParts(AsText(data, size), '\n', 4);
  for (size_t i = 0; i < lines.size(); ++i) {
    const cli::BatchAnswer answer = cli::RunBatchLine(lines[i], static_cast<int64_t>(i) + 1, run);
    DTSIM_FUZZ_EXPECT(answer.json.is_object(), "line ", i + 1);
    if (answer.failed) {
      DTSIM_FUZZ_EXPECT(!answer.json.contains("internal"), SafeDump(answer.json));
      DTSIM_FUZZ_EXPECT(answer.json.contains("field") && answer.json["field"].is_string(),
                        SafeDump(answer.json));
      const std::string& error = answer.json["error"].get_ref<const std::string&>();
      const std::string& field = answer.json["field"].get_ref<const std::string&>();
      DTSIM_FUZZ_EXPECT(error.rfind(field + ": ", 0) == 0,
                        "the message starts with its field: ", error);
      DTSIM_FUZZ_EXPECT(error.size() < 4096, "echoed values are capped: ", error.size(),
                        " characters");
    }
    (void)SafeDump(answer.json);  // printable, whatever the input held
  }
}

}  // namespace dtsim::fuzz
