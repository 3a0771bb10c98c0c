// Helpers shared by the viewer tests: paths of the golden traces, editing a trace's JSON into a
// temporary file.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "dtsim/trace/trace.h"

namespace dtsim::viewer::testing {

inline std::string Golden(const std::string& name) {
  return std::string(DTSIM_SOURCE_DIR) + "/traces/" + name;
}

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A file in a fresh temporary directory, removed with it at exit of the test binary (best effort).
inline std::string TempPath(const std::string& name) {
  static std::string dir = [] {
    char tmpl[] = "/tmp/dtsim_viewer_test_XXXXXX";
    const char* d = mkdtemp(tmpl);
    return std::string(d ? d : "/tmp");
  }();
  return dir + "/" + name;
}

inline std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// A copy of golden trace `name` with `edit` applied to its JSON, written to a temporary file.
inline std::string EditedTrace(const std::string& name, const std::string& out_name,
                               const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = ReadJson(Golden(name));
  edit(j);
  return WriteText(out_name, j.dump(1));
}

// A hash that differs from `hash` in its last digit.
inline std::string OtherHash(const std::string& hash) {
  std::string h = hash;
  h.back() = h.back() == '0' ? '1' : '0';
  return h;
}

}  // namespace dtsim::viewer::testing
