// Helpers shared by the fuzz targets (tests/fuzz/README.md): splitting an input into parts, the
// small case limits that keep every input fast, and the failure report (a finding is an abort with
// the reason on stderr).
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/trace.h"

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

// The structured targets' fixed sweep, DTSIM_FUZZ_SWEEP=N:SEED (their ctest entries set it): once
// per process, N programs of 2 to `max_bytes` bytes from a PRNG seeded with SEED, each given to
// `run(data, size)`, which returns true when the mutated input was accepted. A finding aborts with
// the program's bytes on stderr (save them as corpus/<target>/regression-<what> to replay it); at
// the end one line counts the inputs accepted and refused.
inline std::vector<uint8_t>& SweepProgram() {
  static std::vector<uint8_t> program;
  return program;
}

inline void PrintSweepProgram(int) {
  std::fprintf(stderr, "sweep program:");
  for (uint8_t b : SweepProgram()) std::fprintf(stderr, " %02x", b);
  std::fprintf(stderr, "\n");
  std::signal(SIGABRT, SIG_DFL);
}

template <typename Run>
void SweepOnce(const char* target, size_t max_bytes, Run run) {
  static bool done = false;
  if (done) return;
  done = true;
  const char* env = std::getenv("DTSIM_FUZZ_SWEEP");
  if (!env) return;
  int64_t n = 0;
  uint64_t seed = 0;
  char colon = 0;
  std::istringstream in(env);
  if (!(in >> n >> colon >> seed) || colon != ':' || n < 0) {
    Fail(StrCat("DTSIM_FUZZ_SWEEP='", env, "': expected N:SEED"));
  }
  std::mt19937_64 rng(seed);
  int64_t accepted = 0;
  std::vector<uint8_t>& program = SweepProgram();
  auto previous = std::signal(SIGABRT, PrintSweepProgram);
  for (int64_t i = 0; i < n; ++i) {
    program.resize(2 + rng() % (max_bytes - 1));
    for (uint8_t& b : program) b = static_cast<uint8_t>(rng());
    accepted += run(program.data(), program.size()) ? 1 : 0;
  }
  std::signal(SIGABRT, previous);
  std::fprintf(stderr, "%s sweep (seed %llu): %lld mutated inputs, %lld accepted, %lld refused\n",
               target, static_cast<unsigned long long>(seed), static_cast<long long>(n),
               static_cast<long long>(accepted), static_cast<long long>(n - accepted));
}

// A structured target's input: its bytes read one at a time (zeros once they run out), each
// choosing the next mutation or its operands.
class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t Next() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool done() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// One of `from`, chosen by the program's next byte.
template <typename T>
const T& Pick(Program& p, const std::vector<T>& from) {
  return from[p.Next() % from.size()];
}

// Thrown by a mutation that no longer fits what earlier ones left (an empty list to pick from):
// the mutation is skipped.
struct SkipMutation {};

// The index of one of `n` things, chosen by the program's next byte; SkipMutation when n is 0.
inline size_t AnyIndex(Program& p, size_t n) {
  if (n == 0) throw SkipMutation{};
  return p.Next() % n;
}

// One element of the JSON array `list`, chosen by the program's next byte; SkipMutation when
// `list` is no array or empty.
inline nlohmann::json& AnyOf(Program& p, nlohmann::json& list) {
  if (!list.is_array()) throw SkipMutation{};
  return list[AnyIndex(p, list.size())];
}

// Applies up to `max_mutations` of `mutate(p, doc)` while the program lasts; a mutation that no
// longer fits what earlier ones left (a JSON error, SkipMutation) is skipped, and the JSON stays
// valid.
template <typename Mutate>
void ApplyMutations(Program& p, nlohmann::json& doc, int max_mutations, Mutate mutate) {
  for (int m = 0; m < max_mutations && !p.done(); ++m) {
    try {
      mutate(p, doc);
    } catch (const nlohmann::json::exception&) {
    } catch (const SkipMutation&) {
    }
  }
}

// A refusal as every target expects it: an InputError of `field` with a capped message.
inline void ExpectRefusal(const InputError& e, const char* field) {
  DTSIM_FUZZ_EXPECT(e.field() == field, e.what());
  DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 4096,
                    "capped message: ", std::string(e.what()).size());
}

// A structured target's seed: the JSON file at `path`, read with dtsim's limits.
inline nlohmann::json ReadSeedJson(const std::filesystem::path& path, const char* field) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseJsonText(text, field, path.string());
}

// A structured target's LLVMFuzzerTestOneInput: its fixed sweep once (SweepOnce), then this input.
// `run(data, size)` returns true when the mutated input was accepted.
template <typename Run>
int RunStructuredTarget(const char* target, size_t max_bytes, const uint8_t* data, size_t size,
                        Run run) {
  SweepOnce(target, max_bytes, run);
  run(data, size);
  return 0;
}

}  // namespace dtsim::fuzz
