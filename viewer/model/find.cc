// Finding ranks and steps (see find.h).
#include "find.h"

#include <algorithm>
#include <cctype>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim::viewer {
namespace {

std::string Lower(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits at separators (commas, spaces, brackets); keeps "name=value" items whole.
std::vector<std::string> Items(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == '(' || c == ')' || c == '[' || c == ']' ||
        std::isspace(static_cast<unsigned char>(c))) {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  // "dp = 1" spelled with spaces: join "dp", "=", "1" and "dp=", "1".
  std::vector<std::string> joined;
  for (const std::string& item : out) {
    if (!joined.empty() && (item.front() == '=' || joined.back().back() == '=')) {
      joined.back() += item;
    } else {
      joined.push_back(item);
    }
  }
  return joined;
}

bool ParseInt(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *v = std::stoll(s);
  return true;
}

}  // namespace

int64_t ParseRankQuery(const TraceModel& model, const std::string& text) {
  return ParseRankQuery(model.mesh(), text);
}

int64_t ParseRankQuery(const DeviceMesh& mesh, const std::string& text) {
  const std::vector<std::string> items = Items(text);
  if (items.empty()) throw InputError("go to", "type a rank number or a coordinate, e.g. 5 or 1,2");
  auto shown = [&] { return "'" + ExcerptText(text) + "'"; };
  std::vector<int64_t> coord(mesh.ndim(), -1);
  const bool named = items.front().find('=') != std::string::npos;
  if (!named && items.size() == 1) {
    int64_t rank = 0;
    if (!ParseInt(items[0], &rank))
      throw InputError("go to", shown() + " is not a rank number or a coordinate");
    if (mesh.PositionOf(rank) < 0) {
      throw InputError("go to", StrCat("rank ", rank, " is not in ", mesh.ToString(), " (",
                                       mesh.size(), " ranks)"));
    }
    return rank;
  }
  if (!named) {
    if (static_cast<int64_t>(items.size()) != mesh.ndim()) {
      throw InputError("go to", StrCat(shown(), " has ", items.size(), " coordinates; ",
                                       mesh.ToString(), " has ", mesh.ndim(), " dims"));
    }
    for (size_t d = 0; d < items.size(); ++d) {
      if (!ParseInt(items[d], &coord[d]))
        throw InputError("go to",
                         StrCat(shown(), ": '", ExcerptText(items[d]), "' is not a coordinate"));
    }
  } else {
    for (const std::string& item : items) {
      const size_t eq = item.find('=');
      int64_t value = 0;
      if (eq == std::string::npos || !ParseInt(item.substr(eq + 1), &value)) {
        throw InputError(
            "go to", StrCat(shown(), ": '", ExcerptText(item), "' must be NAME=INDEX, e.g. dp=1"));
      }
      const std::string name = item.substr(0, eq);
      const std::optional<int64_t> d = mesh.FindDim(name);
      if (!d)
        throw InputError("go to",
                         StrCat(shown(), ": no mesh dim '", name, "' in ", mesh.ToString()));
      coord[*d] = value;
    }
    for (int64_t d = 0; d < mesh.ndim(); ++d) {
      if (coord[d] < 0) {
        throw InputError("go to",
                         StrCat(shown(), " gives no index for mesh dim ", mesh.DimLabel(d)));
      }
    }
  }
  for (int64_t d = 0; d < mesh.ndim(); ++d) {
    if (coord[d] >= mesh.size(d)) {
      throw InputError("go to", StrCat(shown(), ": index ", coord[d], " is outside mesh dim ",
                                       mesh.DimLabel(d), " of size ", mesh.size(d)));
    }
  }
  int64_t position = 0;
  for (int64_t d = 0; d < mesh.ndim(); ++d) position = position * mesh.size(d) + coord[d];
  return mesh.ranks()[position];
}

std::vector<int64_t> FindSteps(const TraceModel& model, const std::string& query) {
  std::vector<std::string> terms;
  {
    std::string cur;
    for (char c : Lower(query)) {
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (!cur.empty()) terms.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) terms.push_back(cur);
  }
  // "dim 1": one term.
  for (size_t i = 0; i + 1 < terms.size(); ++i) {
    if (terms[i] == "dim") {
      terms[i] += " " + terms[i + 1];
      terms.erase(terms.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
  }
  std::vector<int64_t> out;
  if (terms.empty()) return out;
  const DeviceMesh& mesh = model.mesh();
  for (int64_t f = 0; f < model.num_frames(); ++f) {
    const Frame& fr = model.frame(f);
    if (fr.kind != Frame::Kind::kAfterStep) continue;
    const TraceStep& step = model.trace().steps[fr.step];
    const std::string kind = Lower(std::string(ToString(step.plan.collective)));
    const std::string dim_name =
        Lower(mesh.names().empty() ? "" : mesh.DimLabel(step.plan.mesh_dim));
    const std::string dim_index = StrCat("dim ", step.plan.mesh_dim);
    const std::string from = Lower(step.plan.from.ToString()), to = Lower(step.plan.to.ToString());
    const bool all = std::all_of(terms.begin(), terms.end(), [&](const std::string& t) {
      return kind.rfind(t, 0) == 0 || (!dim_name.empty() && dim_name == t) || dim_index == t ||
             from == t || to == t;
    });
    if (all) out.push_back(f);
  }
  return out;
}

}  // namespace dtsim::viewer
