// The per-step memory report (see memory_report.h).
#include "memory_report.h"

#include <algorithm>
#include <cstdio>

#include "dtsim/layout/error.h"

namespace dtsim::cli {

MemoryStats Summarize(const MemoryRow& row) {
  MemoryStats s;
  if (row.bytes.empty()) return s;
  std::vector<int64_t> sorted = row.bytes;
  std::sort(sorted.begin(), sorted.end());
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = sorted[(sorted.size() - 1) / 2];
  const size_t at = std::max_element(row.bytes.begin(), row.bytes.end()) - row.bytes.begin();
  s.max_rank = row.ranks.at(at);
  return s;
}

nlohmann::json MemoryToJson(const std::vector<MemoryRow>& rows, bool per_rank) {
  nlohmann::json out = nlohmann::json::array();
  for (const MemoryRow& row : rows) {
    const MemoryStats s = Summarize(row);
    nlohmann::json j = {{"step", row.step},         {"label", row.label}, {"min_bytes", s.min},
                        {"median_bytes", s.median}, {"max_bytes", s.max}, {"max_rank", s.max_rank}};
    if (per_rank) j["peak_bytes_per_rank"] = row.bytes;
    out.push_back(std::move(j));
  }
  return out;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return StrCat(bytes, " B");
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

namespace {
// Characters, not bytes ("→" is three bytes of UTF-8).
size_t DisplayWidth(const std::string& text) {
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}
}  // namespace

std::string RenderMemory(const std::vector<MemoryRow>& rows) {
  std::string out =
      "peak memory per rank (live shards + padding buffers + collective outputs; the start: live "
      "bytes):\n";
  size_t width = 0;
  for (const MemoryRow& row : rows) width = std::max(width, DisplayWidth(row.label));
  for (const MemoryRow& row : rows) {
    const MemoryStats s = Summarize(row);
    out += StrCat("  ", row.label, std::string(width - DisplayWidth(row.label), ' '), "   min ",
                  FormatBytes(s.min), "  median ", FormatBytes(s.median), "  max ",
                  FormatBytes(s.max), " (rank ", s.max_rank, ")\n");
  }
  return out;
}

}  // namespace dtsim::cli
