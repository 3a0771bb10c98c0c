// Fuzz target: traces that lie. Each input is a program of semantic mutations applied to one of the
// golden traces (traces/*.json, read once): numbers that lie (ranks, group members, shapes,
// offsets, coordinates, times, bytes, mesh dims, counts), structure that lies (a rank state or a
// step dropped, duplicated or reordered, groups and rank states copied or swapped between places
// of the same name, keys removed or added, placements replaced, mesh ranks permuted, hashes
// changed), and the run relabelled (simulated or real backend, data or metadata only). The JSON
// stays valid; what it says may be impossible. Properties, beyond "no crash, no sanitizer report":
//  * a refusal is InputError("trace") with a capped message (dtsim's exit 2), never another
//    exception (an internal error is a finding);
//  * the two readers agree: TraceFromText (what ReadTrace, trace-diff, export and the viewer use,
//    over the text, indented or compact) and TraceFromJson (over a DOM) accept the same traces and
//    refuse the others with the same message;
//  * an accepted trace is possible — checked here independently of the validator (Impossible()
//    below lists what): every rank in the mesh and every state listing the same ranks, coordinates
//    and offsets inside the mesh and tensor, a simulated run's layouts the specs', groups a
//    partition of the mesh along the step's mesh dim, per-rank lists as long as their ranks, steps
//    that chain and run the collective their transition needs, finite non-negative times that add
//    up to what an export can write;
//  * an accepted trace writes JSON that reads back to the same JSON and diffs equal to itself.
//
// DTSIM_FUZZ_SWEEP=N:SEED (ctest's fuzz_trace_semantic sets it): the first input also runs N
// programs drawn from SEED (a deterministic sweep that CI runs in both builds, with or without
// libFuzzer) and prints how many traces were accepted and refused.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/transition.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "fuzz_common.h"

namespace {

using dtsim::InputError;
using dtsim::StrCat;
using Json = nlohmann::json;

constexpr double kMaxMicros = 1e15;  // what the validator allows (trace.cc's kMaxTraceMicros)

std::vector<Json> LoadGoldens() {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(DTSIM_SOURCE_DIR) / "traces")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Json> out;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Json j = dtsim::ParseJsonText(text, "trace", f.string());
    dtsim::TraceFromJson(j);  // a golden trace is valid, or the target has nothing to lie about
    out.push_back(std::move(j));
  }
  if (out.empty()) dtsim::fuzz::Fail(StrCat("no golden traces in ", DTSIM_SOURCE_DIR, "/traces"));
  return out;
}

const std::vector<Json>& Goldens() {
  static const std::vector<Json> goldens = LoadGoldens();
  return goldens;
}

// The bytes of an input, read as a program: each read takes the next bytes (zero once they run
// out).
class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint64_t Next(int bytes = 1) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }
  size_t Pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next(2) % n); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Every value of a JSON document by its pointer, with the name of the nearest key above it and how
// many list levels lie between (".../ranks/3" is ("ranks", 1), ".../groups/1/0" ("groups", 2)).
struct Slot {
  Json::json_pointer at;
  std::string name;
  int depth_in_lists = 0;
};

void Collect(const Json& j, const Json::json_pointer& at, const std::string& name, int lists,
             std::vector<Slot>* out) {
  out->push_back({at, name, lists});
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) Collect(value, at / key, key, 0, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) Collect(j[i], at / i, name, lists + 1, out);
  }
}

std::vector<Slot> Slots(const Json& j) {
  std::vector<Slot> out;
  Collect(j, Json::json_pointer(), "", 0, &out);
  return out;
}

template <typename Pred>
std::vector<const Slot*> Where(const std::vector<Slot>& slots, const Json& doc, Pred pred) {
  std::vector<const Slot*> out;
  for (const Slot& s : slots) {
    if (pred(s, doc.at(s.at))) out.push_back(&s);
  }
  return out;
}

// The mesh's rank count as the (possibly mutated) initial spec says, 8 when it says nothing usable.
int64_t MeshSize(const Json& doc) {
  const Json::json_pointer at("/initial/spec/mesh/shape");
  if (!doc.contains(at) || !doc.at(at).is_array()) return 8;
  int64_t n = 1;
  for (const Json& d : doc.at(at)) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20)) return 8;
    n = std::min<int64_t>(n * d.get<int64_t>(), 1 << 20);
  }
  return n;
}

// Wrapping int64 arithmetic (the lie may overflow; the mutator must not).
int64_t Wrap(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t U(int64_t v) { return static_cast<uint64_t>(v); }

// A number that may lie, from the value it replaces and the mesh's rank count.
Json LyingNumber(uint64_t pick, const Json& old, int64_t ranks) {
  const int64_t v = old.is_number_integer() ? old.get<int64_t>() : 0;
  switch (pick % 20) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return -1;
    case 3:
      return Wrap(U(v) + 1);
    case 4:
      return Wrap(U(v) - 1);
    case 5:
      return Wrap(U(v) * 2);
    case 6:
      return ranks;
    case 7:
      return ranks - 1;
    case 8:
      return ranks + 1;
    case 9:
      return std::numeric_limits<int64_t>::max();
    case 10:
      return std::numeric_limits<int64_t>::min();
    case 11:
      return int64_t{1} << 62;
    case 12:
      return uint64_t{1} << 63;
    case 13:
      return 1e15;
    case 14:
      return 1.000001e15;
    case 15:
      return 1e300;
    case 16:
      return 0.5;
    case 17:
      return 9.3e18;
    case 18:
      return Wrap(U(v) * 1000);
    default:
      return Wrap(0 - U(v));
  }
}

Json OtherType(uint64_t pick) {
  switch (pick % 7) {
    case 0:
      return "x";
    case 1:
      return true;
    case 2:
      return nullptr;
    case 3:
      return Json::array();
    case 4:
      return Json::object();
    case 5:
      return Json::array({0, 1});
    default:
      return "[R]";
  }
}

const char* const kPlacementTexts[] = {
    "[R, R]",       "[S(0), R]",   "[R, S(0)]",   "[S(0), S(1)]", "[S(1), S(0)]",
    "[S(0), S(0)]", "[P(sum), R]", "[R, P(sum)]", "[_S(0,2), R]", "[_S(0,2), S(0)]",
    "[S(1), R]",    "[S(0)]",      "[R, R, R]",   "[S(2), R]",    "[P(max), S(1)]",
    "[_S(1,3), R]", "[S(-1), R]",  "[R, S(1)]",   "[P(avg), R]",  "[]"};
const char* const kPlacementOne[] = {"R",       "S(0)",   "S(1)",  "P(sum)", "_S(0,2)",
                                     "_S(0,1)", "P(max)", "S(-1)", "S(5)",   "P(band)"};

bool IsPlacementsKey(const std::string& k) {
  return k == "placements" || k == "placements_after" || k == "placements_before";
}
bool IsPlacementKey(const std::string& k) {
  return k == "from" || k == "to" || k == "upstream_from" || k == "upstream_to";
}

// Applies one mutation of the program to `doc` (the JSON stays valid).
void Mutate(Program& p, Json& doc) {
  const std::vector<Slot> slots = Slots(doc);
  const int64_t ranks = MeshSize(doc);
  const uint64_t op = p.Next() % 16;
  auto pick = [&](const std::vector<const Slot*>& from) -> const Slot* {
    return from.empty() ? nullptr : from[p.Pick(from.size())];
  };
  switch (op) {
    case 0: {  // a number lies
      const Slot* s =
          pick(Where(slots, doc, [](const Slot&, const Json& v) { return v.is_number(); }));
      if (s) doc.at(s->at) = LyingNumber(p.Next(), doc.at(s->at), ranks);
      break;
    }
    case 1: {  // a number moves by a little or by the mesh
      const Slot* s =
          pick(Where(slots, doc, [](const Slot&, const Json& v) { return v.is_number_integer(); }));
      if (!s) break;
      const int64_t deltas[] = {1, -1, ranks, -ranks, 2, 1 << 20};
      doc.at(s->at) = Wrap(U(doc.at(s->at).get<int64_t>()) + U(deltas[p.Next() % 6]));
      break;
    }
    case 2: {  // a value of another type
      const Slot* s =
          pick(Where(slots, doc, [](const Slot& s, const Json&) { return !s.at.empty(); }));
      if (s) doc.at(s->at) = OtherType(p.Next());
      break;
    }
    case 3:    // drop an element of a list
    case 4:    // duplicate one
    case 5: {  // swap two
      const Slot* s = pick(Where(slots, doc, [&](const Slot&, const Json& v) {
        return v.is_array() && v.size() >= (op == 5 ? 2u : 1u);
      }));
      if (!s) break;
      Json& list = doc.at(s->at);
      const size_t i = p.Pick(list.size());
      const size_t k = p.Pick(list.size());
      if (op == 3) {
        list.erase(i);
      } else if (op == 4) {
        list.insert(list.begin() + static_cast<std::ptrdiff_t>(k), Json(list[i]));
      } else {
        std::swap(list[i], list[k]);
      }
      break;
    }
    case 6:    // copy a value onto another of the same name
    case 7: {  // swap two of the same name
      const Slot* a =
          pick(Where(slots, doc, [](const Slot& s, const Json&) { return !s.at.empty(); }));
      if (!a) break;
      const Slot* b = pick(Where(slots, doc, [&](const Slot& s, const Json&) {
        return s.name == a->name && s.depth_in_lists == a->depth_in_lists && s.at != a->at &&
               !s.at.to_string().empty() &&
               s.at.to_string().rfind(a->at.to_string() + "/", 0) != 0 &&
               a->at.to_string().rfind(s.at.to_string() + "/", 0) != 0;
      }));
      if (!b) break;
      if (op == 6) {
        doc.at(a->at) = Json(doc.at(b->at));
      } else {
        Json tmp = doc.at(a->at);
        doc.at(a->at) = doc.at(b->at);
        doc.at(b->at) = std::move(tmp);
      }
      break;
    }
    case 8: {  // remove a key
      const Slot* s = pick(Where(slots, doc, [&](const Slot& s, const Json&) {
        return !s.at.empty() && doc.at(s.at.parent_pointer()).is_object();
      }));
      if (s) doc.at(s->at.parent_pointer()).erase(s->at.back());
      break;
    }
    case 9: {  // add a key nobody reads
      const Slot* s =
          pick(Where(slots, doc, [](const Slot&, const Json& v) { return v.is_object(); }));
      if (s) doc.at(s->at)["x_unknown"] = p.Next();
      break;
    }
    case 10: {  // placements replaced
      const Slot* s = pick(Where(slots, doc, [](const Slot& s, const Json& v) {
        return v.is_string() && (IsPlacementsKey(s.name) || IsPlacementKey(s.name));
      }));
      if (!s) break;
      if (IsPlacementsKey(s->name)) {
        doc.at(s->at) = kPlacementTexts[p.Next() % std::size(kPlacementTexts)];
      } else {
        doc.at(s->at) = kPlacementOne[p.Next() % std::size(kPlacementOne)];
      }
      break;
    }
    case 11: {  // the run relabelled
      Json& meta = doc["meta"];
      switch (p.Next() % 5) {
        case 0:
          meta["backend"] = "mpi";
          break;
        case 1:
          meta["backend"] = "nccl";
          break;
        case 2:
          meta["backend"] = "local";
          break;
        case 3:
          meta["data"] = false;
          break;
        default: {  // a metadata-only run: no hash anywhere
          meta["data"] = false;
          for (const Slot& s : slots) {
            if (s.name == "hash" && s.depth_in_lists == 0) {
              doc.at(s.at.parent_pointer()).erase("hash");
            }
          }
        }
      }
      break;
    }
    case 12: {  // measured times, or an estimate, that may lie
      const double times[] = {0, 1.5, 1e6, 1e15, 2e15, 9e14, 1e-300, 5e14};
      const Slot* s = pick(Where(slots, doc, [](const Slot& s, const Json& v) {
        return (s.name == "collectives" && s.depth_in_lists == 1 && v.is_object()) ||
               (s.name == "est_us" && v.is_number());
      }));
      if (!s) break;
      if (s->name == "est_us") {
        doc.at(s->at) = times[p.Next() % std::size(times)];
      } else {
        Json& c = doc.at(s->at);
        const size_t n = c.contains("ranks") && c["ranks"].is_array() ? c["ranks"].size() : 1;
        Json t = Json::array();
        for (size_t i = 0; i < n; ++i) t.push_back(times[p.Next() % std::size(times)]);
        c["time_us"] = std::move(t);
      }
      break;
    }
    case 13: {  // the mesh's ranks in another order (every spec, or one)
      const bool all = p.Next() % 2;
      const size_t i = p.Pick(static_cast<size_t>(ranks)), k = p.Pick(static_cast<size_t>(ranks));
      for (const Slot& s : slots) {
        if (s.name != "mesh" || !doc.at(s.at).is_object() || !doc.at(s.at).contains("ranks"))
          continue;
        Json& r = doc.at(s.at)["ranks"];
        if (r.is_array() && i < r.size() && k < r.size()) std::swap(r[i], r[k]);
        if (!all) break;
      }
      break;
    }
    case 14: {  // another hash of the same form
      const Slot* s = pick(Where(slots, doc, [](const Slot& s, const Json& v) {
        return s.name == "hash" && v.is_string() && v.get<std::string>().size() == 21;
      }));
      if (!s) break;
      std::string h = doc.at(s->at).get<std::string>();
      h[5 + p.Next() % 16] = "0123456789abcdef"[p.Next() % 16];
      doc.at(s->at) = h;
      break;
    }
    default: {  // a step dropped or repeated, steps reordered (indexes renumbered)
      Json& steps = doc["steps"];
      if (!steps.is_array() || steps.empty()) break;
      const size_t i = p.Pick(steps.size());
      switch (p.Next() % 3) {
        case 0:
          steps.erase(i);
          break;
        case 1:
          steps.insert(steps.begin() + static_cast<std::ptrdiff_t>(i), Json(steps[i]));
          break;
        default:
          std::reverse(steps.begin(), steps.end());
      }
      for (size_t k = 0; k < steps.size(); ++k) {
        if (steps[k].is_object()) steps[k]["index"] = k;
      }
    }
  }
}

// ---- the oracle: what no run can record, written without the validator's code ----

std::string PlacementsText(const dtsim::Placements& ps, int64_t ndim) {
  dtsim::Placements out;
  for (const auto& p : ps) out.push_back(p.Normalized(ndim).Canonical());
  return dtsim::ToString(out);
}

// Why the accepted trace `t` cannot be true, or nullopt.
std::optional<std::string> Impossible(const dtsim::Trace& t) {
  using namespace dtsim;
  const DTensorSpec& spec = t.initial.spec;
  const DeviceMesh& mesh = spec.mesh();
  const int64_t ndim = spec.ndim();
  if (t.final_state.spec.shape() != spec.shape() || t.final_state.spec.dtype() != spec.dtype())
    return "final shape/dtype";
  if (t.meta.world_size != 0 && t.meta.world_size != mesh.size()) return "meta.world_size";
  std::vector<int64_t> rank_set;
  for (const RankState& s : t.initial.ranks) rank_set.push_back(s.rank);
  auto check_state = [&](const std::string& where, const std::vector<RankState>& states,
                         const DTensorSpec& at) -> std::optional<std::string> {
    std::vector<int64_t> these;
    for (const RankState& s : states) {
      const auto coord = mesh.FindCoordinate(s.rank);
      if (!coord) return StrCat(where, ": rank ", s.rank, " outside the mesh");
      if (s.coordinate != *coord) return StrCat(where, ": coordinate of rank ", s.rank);
      if (static_cast<int64_t>(s.local_shape.size()) != ndim ||
          static_cast<int64_t>(s.global_offset.size()) != ndim) {
        return StrCat(where, ": dims of rank ", s.rank);
      }
      for (int64_t d = 0; d < ndim; ++d) {
        if (s.local_shape[d] < 0 || s.local_shape[d] > spec.shape()[d] || s.global_offset[d] < 0 ||
            s.global_offset[d] > spec.shape()[d]) {
          return StrCat(where, ": rank ", s.rank, " outside the tensor");
        }
      }
      if (t.meta.data && !s.hash) return StrCat(where, ": no hash");
      if (t.meta.backend == "local") {
        const RankLayout l = at.LayoutAt(*coord);
        if (l.local_shape != s.local_shape || l.global_offset != s.global_offset)
          return StrCat(where, ": simulated layout of rank ", s.rank);
      }
      if (!these.empty() && s.rank <= these.back()) return StrCat(where, ": ranks out of order");
      these.push_back(s.rank);
    }
    if (these != rank_set) return StrCat(where, ": not the ranks of initial");
    return std::nullopt;
  };
  if (auto why = check_state("initial", t.initial.ranks, spec)) return why;
  if (auto why = check_state("final", t.final_state.ranks, t.final_state.spec)) return why;
  auto check_groups = [&](const std::vector<std::vector<int64_t>>& groups,
                          int64_t dim) -> std::optional<std::string> {
    std::set<int64_t> covered;
    for (const auto& g : groups) {
      if (g.empty() || !mesh.FindCoordinate(g[0]) || g != mesh.GroupAlong(dim, g[0]))
        return IntListToString(g) + " is no group along the dim";
      for (int64_t r : g) {
        if (!covered.insert(r).second) return StrCat("rank ", r, " in two groups");
      }
    }
    if (!groups.empty() && static_cast<int64_t>(covered.size()) != mesh.size())
      return std::string("groups do not cover the mesh");
    return std::nullopt;
  };
  double total = 0;
  std::string previous_after;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const TraceStep& s = t.steps[i];
    const PlanStep& p = s.plan;
    const std::string where = StrCat("steps[", i, "]");
    if (p.mesh_dim < 0 || p.mesh_dim >= mesh.ndim()) return where + ": mesh_dim";
    if (static_cast<int64_t>(p.placements_before.size()) != mesh.ndim()) return where + ": before";
    const std::string before = PlacementsText(p.placements_before, ndim);
    const std::string after = PlacementsText(s.placements_after, ndim);
    if (after != PlacementsText(p.placements_after, ndim)) return where + ": two placements_after";
    if (i > 0 && before != previous_after) return where + ": does not chain";
    previous_after = after;
    Placements expect = p.placements_before;
    for (auto& q : expect) q = q.Normalized(ndim).Canonical();
    const Placement from = p.from.Normalized(ndim).Canonical();
    const Placement to = p.to.Normalized(ndim).Canonical();
    if (expect[p.mesh_dim] != from) return where + ": from is not the layout's";
    expect[p.mesh_dim] = to;
    if (ToString(expect) != after) return where + ": placements_after";
    const TransitionRule rule = RuleFor(from, to, mesh.shape()[p.mesh_dim], p.mesh_dim);
    if (!(rule == TransitionRule{p.collective, p.then_local_split})) return where + ": collective";
    if (auto why = check_groups(p.groups, p.mesh_dim)) return where + ": plan " + *why;
    for (const auto* list :
         {&p.bytes_sent_per_rank, &p.bytes_received_per_rank, &p.peak_extra_bytes_per_rank}) {
      if (!list->empty() && static_cast<int64_t>(list->size()) != mesh.size())
        return where + ": per-rank list";
    }
    if (!p.logical_shape_per_rank.empty() &&
        static_cast<int64_t>(p.logical_shape_per_rank.size()) != mesh.size())
      return where + ": logical shapes";
    if (!std::isfinite(p.est_us) || p.est_us < 0 || p.est_us > kMaxMicros)
      return where + ": est_us";
    total += p.est_us;
    for (size_t k = 0; k < s.collectives.size(); ++k) {
      const CollectiveEvent& c = s.collectives[k];
      const std::string cw = StrCat(where, ".collectives[", k, "]");
      if (auto why = check_groups(c.groups, p.mesh_dim)) return cw + ": " + *why;
      std::set<int64_t> in_groups;
      for (const auto& g : c.groups) in_groups.insert(g.begin(), g.end());
      const size_t n = c.ranks.size();
      for (size_t r = 0; r < n; ++r) {
        if (!mesh.FindCoordinate(c.ranks[r])) return cw + ": rank outside the mesh";
        if (!c.groups.empty() && !in_groups.count(c.ranks[r])) return cw + ": rank in no group";
        if (r > 0 && std::count(c.ranks.begin(), c.ranks.begin() + r, c.ranks[r]))
          return cw + ": rank twice";
      }
      if (c.input_shapes.size() != n || c.output_shapes.size() != n || c.bytes_sent.size() != n ||
          c.bytes_received.size() != n || (!c.time_us.empty() && c.time_us.size() != n))
        return cw + ": per-rank lists";
      double longest = 0;
      for (double v : c.time_us) {
        if (!std::isfinite(v) || v < 0 || v > kMaxMicros) return cw + ": time_us";
        longest = std::max(longest, v);
      }
      total += longest;
    }
    if (!(total <= kMaxMicros)) return where + ": times add up beyond an export";
    const DTensorSpec at =
        DTensorSpec::Create(mesh, s.placements_after, spec.shape(), spec.dtype());
    if (auto why = check_state(where + ".ranks_after", s.ranks_after, at)) return why;
  }
  return std::nullopt;
}

struct Outcome {
  std::optional<dtsim::Trace> trace;
  std::string error;  // the InputError's message when refused
};

template <typename F>
Outcome Read(const char* reader, F&& read) {
  Outcome out;
  try {
    out.trace = read();
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", reader, ": ", e.what());
    out.error = e.what();
    DTSIM_FUZZ_EXPECT(out.error.size() < 4096, reader, ": capped message: ", out.error.size());
  } catch (const std::exception& e) {
    dtsim::fuzz::Fail(StrCat(reader, ": not an InputError (dtsim would exit 3): ", e.what()));
  }
  return out;
}

struct Counts {
  int64_t accepted = 0;
  int64_t refused = 0;
};

void RunProgram(const uint8_t* data, size_t size, Counts* counts) {
  using namespace dtsim;
  Program p(data, size);
  const std::vector<Json>& goldens = Goldens();
  Json doc = goldens[p.Next() % goldens.size()];
  const uint64_t flags = p.Next();
  for (int m = 0; m < 8 && !p.done(); ++m) {
    try {
      Mutate(p, doc);
    } catch (const nlohmann::json::exception&) {
      // a mutation that no longer fits what earlier ones left (meta made a string, a hash key
      // removed twice): skipped; the document stays valid JSON either way
    }
  }
  const std::string text = SafeDump(doc, flags % 2 ? 1 : -1);

  const Outcome from_text =
      Read("TraceFromText", [&] { return TraceFromText(TraceTextOf("input", text)); });
  const Outcome from_dom = Read("TraceFromJson", [&] {
    return WithFileName("input",
                        [&] { return TraceFromJson(ParseJsonText(text, "trace", "'input'")); });
  });
  DTSIM_FUZZ_EXPECT(from_text.trace.has_value() == from_dom.trace.has_value(),
                    "the readers disagree: text: ", from_text.error, " / DOM: ", from_dom.error);
  if (!from_text.trace) {
    DTSIM_FUZZ_EXPECT(from_text.error == from_dom.error,
                      "the readers' messages differ: text: ", from_text.error,
                      " / DOM: ", from_dom.error);
    ++counts->refused;
    return;
  }
  ++counts->accepted;
  const Trace& t = *from_text.trace;
  const Json written = ToJson(t);
  DTSIM_FUZZ_EXPECT(ToJson(*from_dom.trace) == written, "the readers built different traces");
  if (auto why = Impossible(t)) {
    fuzz::Fail(StrCat("an impossible trace was accepted (", *why, "): ", text.substr(0, 3000)));
  }
  Trace again;
  try {
    again = TraceFromJson(ParseJsonText(SafeDump(written), "trace", "written"));
  } catch (const InputError& e) {
    fuzz::Fail(StrCat("an accepted trace does not read back after writing: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(ToJson(again) == written, "round trip");
  const auto diffs = DiffTraces(t, again);
  DTSIM_FUZZ_EXPECT(diffs.empty(), "a trace differs from its own copy: ", diffs[0].where);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtsim::fuzz::SweepOnce("trace_semantic", 40, [](const uint8_t* program, size_t bytes) {
    Counts counts;
    RunProgram(program, bytes, &counts);
    return counts.accepted > 0;
  });
  Counts counts;
  RunProgram(data, size, &counts);
  return 0;
}
