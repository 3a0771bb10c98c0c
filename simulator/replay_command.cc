// dtsim replay: re-runs in simulation every redistribution a recorded upstream PyTorch run did
// (python/dtsim/recorder.py), from the recorded source shards, and says per redistribution whether
// the real run's shards, layouts, collectives and bytes equal dtsim's.
//
//   dtsim replay run.json [--json] [--limit 20]
// Exit 0 when every redistribution agrees, 1 when one differs, 2 for an unreadable or invalid
// recording — as trace-diff — and 3 when nothing differs but some shards could not be checked: the
// recorder marks a rank's hash unavailable ("hash": null, "unavailable": "<why>") when the value a
// redistribution produced was gone before it could hash it (an async result written in place
// around the waits it hooks); such a rank is reported as not checked, never as equal.
//
// What is compared, per redistribution: every rank's local shape before and after with dtsim's
// layout of the source and target specs; the collectives upstream issued (kind, groups, each
// rank's input and output buffer bytes) with dtsim's plan; and, where the recording kept the
// source shards (its sidecar data file), every rank's result hash with dtsim's result computed
// from those shards. Upstream on a CPU process group (Gloo) has no all_to_all and runs S(i) ->
// S(j) as an all_gather then a local chunk: for torch-gloo recordings (and dtsim-run ones, whose
// device meshes are CPU meshes) dtsim's all_to_all is expected as that all_gather. Under upstream's
// LocalTensorMode every rank's group is the fake group of rank 0, so groups are checked to be among
// dtsim's there, not equal.
#include <ATen/ATen.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "file_arguments.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

constexpr int64_t kMaxRecordingDataBytes = int64_t{16} << 30;

// A collective as compared: kind, groups, per-rank buffer bytes.
struct Expected {
  CollectiveKind kind = CollectiveKind::kNone;
  std::vector<std::vector<int64_t>> groups;
  std::map<int64_t, int64_t> input_bytes;   // rank -> bytes
  std::map<int64_t, int64_t> output_bytes;  // rank -> bytes
  bool gloo_fallback = false;
};

// A rank state whose hash the recorder could not take, and why.
struct Unavailable {
  bool before = false;  // ranks_before (a source) or ranks_after (a result)
  int64_t rank = 0;
  std::string reason;
};

struct Outcome {
  const RedistributionEvent* rec = nullptr;
  bool data = false;
  int64_t shards_checked = 0;
  std::vector<int64_t> differing_ranks;
  std::vector<std::string> problems;
  std::vector<std::string> notes;  // differences explained (floating-point summation order)
  std::vector<Expected> expected;
  std::vector<int64_t> unchecked_ranks;  // results not compared: a hash the recorder could not take
  std::vector<std::string> unchecked;    // why, one line per rank
  bool equal() const { return problems.empty(); }
};

// The recorder writes a rank state it could not hash as {"rank", "local_shape", "hash": null,
// "unavailable": "<why>"}. The trace library's reader requires a hash in every state, so replay
// takes these out first: it lists them per redistribution (by position) and gives `doc` a
// placeholder hash there, never compared (sources: no recomputation; results: not checked).
std::map<size_t, std::vector<Unavailable>> TakeUnavailable(nlohmann::json& doc,
                                                           const std::string& path) {
  std::map<size_t, std::vector<Unavailable>> out;
  if (!doc.is_object() || !doc.contains("redistributions") || !doc["redistributions"].is_array())
    return out;
  nlohmann::json& recs = doc["redistributions"];
  for (size_t i = 0; i < recs.size(); ++i) {
    if (!recs[i].is_object()) continue;
    for (const char* side : {"ranks_before", "ranks_after"}) {
      if (!recs[i].contains(side) || !recs[i][side].is_array()) continue;
      nlohmann::json& states = recs[i][side];
      for (size_t j = 0; j < states.size(); ++j) {
        nlohmann::json& s = states[j];
        if (!s.is_object() || !s.contains("unavailable")) continue;
        const std::string where =
            StrCat("'", ExcerptText(path), "': redistributions[", i, "].", side, "[", j, "]");
        if (!s["unavailable"].is_string() || s["unavailable"].get<std::string>().empty()) {
          throw InputError("recording", StrCat(where, ".unavailable: expected the reason, got ",
                                               Excerpt(s["unavailable"])));
        }
        if (!s.contains("hash") || !s["hash"].is_null()) {
          throw InputError("recording",
                           StrCat(where, ".hash: a state marked unavailable has a null hash"));
        }
        if (!s.contains("rank") || !s["rank"].is_number_integer()) continue;  // the reader says
        out[i].push_back({side[6] == 'b', s["rank"].get<int64_t>(),
                          ExcerptText(s["unavailable"].get<std::string>(), 300)});
        s["hash"] = "xxh3:0000000000000000";  // a placeholder, never compared (above)
        s.erase("unavailable");  // taken care of here: the reader sees an ordinary state
      }
    }
  }
  return out;
}

// The spec `rank` runs: `spec` itself, or on a submesh the spec on that rank's own submesh.
DTensorSpec SpecForRank(const RedistributionEvent& r, const DTensorSpec& spec, int64_t rank) {
  if (r.submesh_dims.empty()) return spec;
  return DTensorSpec::Create(spec.mesh().root().Submesh(r.submesh_dims, rank), spec.placements(),
                             spec.shape(), spec.dtype());
}

// dtsim's collectives for `r`: one plan per (sub)mesh the ranks run in, merged step by step
// (groups of every submesh, each rank's bytes from its own).
std::vector<Expected> ExpectedCollectives(const RedistributionEvent& r, bool gloo) {
  std::vector<DTensorSpec> instances;
  std::set<std::vector<int64_t>> seen;
  for (const RankState& s : r.ranks_before()) {
    DTensorSpec spec = SpecForRank(r, r.src(), s.rank);
    if (seen.insert(spec.mesh().ranks()).second) instances.push_back(std::move(spec));
    if (r.submesh_dims.empty()) break;
  }
  std::vector<Expected> out;
  for (const DTensorSpec& spec : instances) {
    // Upstream's plan (its default selection), which the real run ran: the collectives to expect.
    // It may be one dtsim's executor runs in another order (a _StridedShard gathered before the
    // mesh dims it nests in); the shards are recomputed with the plan dtsim runs, to the same end.
    const Plan plan = PlanRedistribute(
        spec, WithoutNewPartials(spec.placements(), r.dst().placements()), PlannerKind::kGreedy);
    const DeviceMesh& mesh = spec.mesh();
    size_t k = 0;
    for (const PlanStep& step : plan.steps) {
      if (!step.communicates()) continue;
      if (out.size() <= k) {
        Expected e;
        e.gloo_fallback = gloo && step.collective == CollectiveKind::kAllToAll;
        e.kind = e.gloo_fallback ? CollectiveKind::kAllGather : step.collective;
        out.push_back(std::move(e));
      }
      Expected& e = out[k++];
      e.groups.insert(e.groups.end(), step.groups.begin(), step.groups.end());
      const int64_t n = mesh.size(step.mesh_dim);
      for (size_t pos = 0; pos < mesh.ranks().size(); ++pos) {
        const int64_t rank = mesh.ranks()[pos];
        e.input_bytes[rank] = step.bytes_sent_per_rank.at(pos);
        e.output_bytes[rank] = e.gloo_fallback ? n * step.bytes_sent_per_rank.at(pos)
                                               : step.bytes_received_per_rank.at(pos);
      }
    }
  }
  for (Expected& e : out) {
    std::sort(e.groups.begin(), e.groups.end());
    e.groups.erase(std::unique(e.groups.begin(), e.groups.end()), e.groups.end());
  }
  return out;
}

std::string GroupsText(const std::vector<std::vector<int64_t>>& groups) {
  std::string out = "[";
  for (size_t g = 0; g < groups.size(); ++g) out += (g ? ", " : "") + IntListToString(groups[g]);
  return out + "]";
}

void CompareCollectives(Outcome& o, bool groups_exact) {
  const auto& got = o.rec->collectives;
  const auto& want = o.expected;
  if (got.size() != want.size()) {
    std::string g, w;
    for (const auto& c : got)
      g += std::string(g.empty() ? "" : ", ") + std::string(ToString(c.kind));
    for (const auto& c : want)
      w += std::string(w.empty() ? "" : ", ") + std::string(ToString(c.kind));
    o.problems.push_back(StrCat("collectives: the run issued ", got.size(), " (",
                                g.empty() ? "none" : g, "), dtsim plans ", want.size(), " (",
                                w.empty() ? "none" : w, ")"));
    return;
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const CollectiveEvent& c = got[k];
    const Expected& e = want[k];
    const std::string where = StrCat("collective ", k, " (", ToString(c.kind), ")");
    if (c.kind != e.kind) {
      o.problems.push_back(StrCat(where, ": dtsim runs ", ToString(e.kind)));
      continue;
    }
    std::set<std::vector<int64_t>> mine(e.groups.begin(), e.groups.end());
    std::set<std::vector<int64_t>> theirs(c.groups.begin(), c.groups.end());
    const bool groups_ok =
        groups_exact ? mine == theirs
                     : std::includes(mine.begin(), mine.end(), theirs.begin(), theirs.end());
    if (!groups_ok) {
      o.problems.push_back(
          StrCat(where, ": groups ", GroupsText(c.groups), ", dtsim's ", GroupsText(e.groups)));
    }
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      const int64_t r = c.ranks[i];
      const auto in = e.input_bytes.find(r);
      if (in == e.input_bytes.end()) continue;  // validated: in the mesh
      if (c.input_bytes[i] != in->second || c.output_bytes[i] != e.output_bytes.at(r)) {
        o.problems.push_back(StrCat(where, ": rank ", r, " sent ", c.input_bytes[i], " and got ",
                                    c.output_bytes[i], " bytes; dtsim's buffers are ", in->second,
                                    " and ", e.output_bytes.at(r)));
        break;
      }
    }
  }
}

void CompareLayouts(Outcome& o) {
  const RedistributionEvent& r = *o.rec;
  for (const auto* pass : {&r.ranks_before(), &r.ranks_after()}) {
    const DTensorSpec& spec = pass == &r.ranks_before() ? r.src() : r.dst();
    for (const RankState& s : *pass) {
      const RankLayout layout = SpecForRank(r, spec, s.rank).LayoutOfRank(s.rank);
      if (layout.local_shape != s.local_shape) {
        o.problems.push_back(
            StrCat("layout: rank ", s.rank, " held ", IntListToString(s.local_shape),
                   pass == &r.ranks_before() ? " before" : " after", "; dtsim's layout of ",
                   ToString(spec.placements()), " gives ", IntListToString(layout.local_shape)));
      }
    }
  }
}

// Consistency inside the recording: ranks whose coordinates differ only on Replicate mesh dims (of
// the same (sub)mesh) hold one replica, so their recorded hashes must be equal, before and after.
// Replaying from the recorded shards cannot see this (a replica written on one rank replays
// "equal" from its own bytes). Partial mesh dims are not masked: partial values differ by design.
// Ranks whose hash is unavailable (`skip`) are left out.
void CompareReplicas(Outcome& o, const std::set<std::pair<bool, int64_t>>& skip) {
  const RedistributionEvent& r = *o.rec;
  for (const ReplicaMismatch& m : ReplicaMismatches(r, skip)) {
    const DTensorSpec& spec = m.before ? r.src() : r.dst();
    o.differing_ranks.push_back(m.rank);
    o.problems.push_back(
        StrCat("replicas: rank ", m.rank, m.before ? " held " : " holds ", m.hash, " ",
               m.before ? "before" : "after", ", where its replicas (", ToString(spec.placements()),
               ": ranks ", IntListToString(m.replicas), ") hold ", m.replica_hash,
               ": a Replicate shard that differs between ranks (written on one rank, or never "
               "made equal)"));
  }
}

// The run's collectives (a `dtsim run --trace` recording lists them): the members of an all_reduce,
// all_gather or broadcast end with equal outputs, so their recorded output hashes must be equal.
// The other kinds give each member its own output; their values are not checkable from hashes.
struct RunCheck {
  int64_t checked = 0;
  int64_t unchecked = 0;
  std::vector<std::string> problems;
  int64_t first_index = -1;  // 1-based, the first collective with a problem
  std::vector<int64_t> first_ranks;
};

RunCheck CheckRunCollectives(const std::vector<CollectiveEvent>& collectives) {
  RunCheck out;
  for (size_t k = 0; k < collectives.size(); ++k) {
    const CollectiveEvent& c = collectives[k];
    const bool equal_outputs = c.kind == CollectiveKind::kAllReduce ||
                               c.kind == CollectiveKind::kAllGather ||
                               c.kind == CollectiveKind::kBroadcast;
    if (!equal_outputs || c.output_hashes.size() != c.ranks.size() || c.ranks.empty()) {
      ++out.unchecked;
      continue;
    }
    ++out.checked;
    std::map<std::string, std::vector<int64_t>> by_hash;
    for (size_t i = 0; i < c.ranks.size(); ++i) by_hash[c.output_hashes[i]].push_back(c.ranks[i]);
    if (by_hash.size() < 2) continue;
    const auto majority = std::max_element(
        by_hash.begin(), by_hash.end(),
        [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    const size_t tied = std::count_if(by_hash.begin(), by_hash.end(), [&](const auto& e) {
      return e.second.size() == majority->second.size();
    });
    if (tied > 1) {  // no majority (two members, or an even split): every member is named
      std::string listing;
      for (size_t i = 0; i < c.ranks.size(); ++i)
        listing += StrCat(i ? ", " : "", "rank ", c.ranks[i], " ", c.output_hashes[i]);
      if (out.first_index < 0) {
        out.first_index = static_cast<int64_t>(k) + 1;
        out.first_ranks = c.ranks;
      }
      out.problems.push_back(StrCat("run collective ", k + 1, " (", ToString(c.kind),
                                    " over ranks ", IntListToString(c.ranks),
                                    "): its members' outputs differ, with no majority: ", listing));
      continue;
    }
    for (const auto& [hash, ranks] : by_hash) {
      if (&hash == &majority->first) continue;
      for (const int64_t rank : ranks) {
        if (out.first_index < 0) out.first_index = static_cast<int64_t>(k) + 1;
        if (out.first_index == static_cast<int64_t>(k) + 1) out.first_ranks.push_back(rank);
        out.problems.push_back(StrCat("run collective ", k + 1, " (", ToString(c.kind),
                                      " over ranks ", IntListToString(c.ranks), "): rank ", rank,
                                      "'s output ", hash, " differs from its peers' ",
                                      majority->first, " (ranks ",
                                      IntListToString(majority->second), ")"));
      }
    }
  }
  return out;
}

// The shards a data section names, as tensors of `states`' shapes and `dtype`.
std::vector<at::Tensor> ShardsOf(const std::vector<RankState>& states,
                                 const std::vector<RecordedData>& entries, DType dtype,
                                 const std::string& data) {
  std::vector<at::Tensor> out;
  const c10::ScalarType type = ToScalarType(dtype);
  for (size_t i = 0; i < states.size(); ++i) {
    at::Tensor t = at::empty(states[i].local_shape, at::TensorOptions().dtype(type));
    if (entries[i].nbytes > 0)
      std::memcpy(t.mutable_data_ptr(), data.data() + entries[i].offset, entries[i].nbytes);
    out.push_back(t);
  }
  return out;
}

double Epsilon(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 1.1920929e-07;
    case DType::kFloat64:
      return 2.220446049250313e-16;
    case DType::kFloat16:
      return 9.765625e-04;
    case DType::kBFloat16:
      return 7.8125e-03;
    default:
      return 0;
  }
}

// Recomputes the redistribution from the recorded source shards and compares every rank's result.
// A floating-point Partial sum/avg reduced in another order than dtsim's (Gloo's, NCCL's rings) may
// differ in the last bits: with the run's results recorded (data_after), a rank whose values lie
// within the summation-order bound of each element, 2·(n−1)·eps·Σ|partials| (n partial values
// reduced; Σ|partials| computed by the same redistribution of |source|), is equal, with a note.
void CompareShards(Outcome& o, const std::string& data) {
  const RedistributionEvent& r = *o.rec;
  std::vector<int64_t> ranks;
  std::vector<at::Tensor> shards = ShardsOf(r.ranks_before(), *r.data, r.src().dtype(), data);
  for (size_t i = 0; i < r.ranks_before().size(); ++i) {
    const RankState& s = r.ranks_before()[i];
    // The data file must be this recording's: a source shard that does not hash to what the run
    // recorded is an invalid input (exit 2), not a difference of the run.
    if (ShardHash(shards[i]) != s.hash) {
      throw InputError("recording",
                       StrCat("data file: redistribution #", r.index, ": rank ", s.rank,
                              "'s source shard does not hash to its recorded ", *s.hash,
                              " (a stale or edited data file, or another recording's)"));
    }
    ranks.push_back(s.rank);
  }
  const DTensor src = DTensor::FromLocal(MakeLocalTensor(ranks, shards), r.src().mesh(),
                                         r.src().placements(), r.src().shape());
  const DTensor out = RedistributeInternal(src, r.dst().placements());
  o.data = true;
  int64_t reduced = 1;
  for (size_t m = 0; m < r.src().placements().size(); ++m) {
    const Placement& p = r.src().placements()[m];
    if (p.is_partial() && !r.dst().placements()[m].is_partial() &&
        (p.reduce_op() == ReduceOp::kSum || p.reduce_op() == ReduceOp::kAvg)) {
      reduced *= r.src().mesh().size(static_cast<int64_t>(m));
    }
  }
  const double eps = Epsilon(r.src().dtype());
  std::optional<DTensor> magnitude;  // Σ|partials| per element, computed when first needed
  std::vector<at::Tensor> recorded;
  if (r.data_after) recorded = ShardsOf(r.ranks_after(), *r.data_after, r.dst().dtype(), data);
  for (size_t i = 0; i < r.ranks_after().size(); ++i) {
    const RankState& s = r.ranks_after()[i];
    if (std::find(o.unchecked_ranks.begin(), o.unchecked_ranks.end(), s.rank) !=
        o.unchecked_ranks.end()) {
      continue;  // its hash is unavailable: nothing to compare with
    }
    const at::Tensor mine = LocalShard(out.to_local(), s.rank);
    ++o.shards_checked;
    const std::string h = ShardHash(mine);
    if (h == *s.hash) continue;
    if (reduced > 1 && eps > 0 && !recorded.empty() && ShardHash(recorded[i]) == *s.hash &&
        recorded[i].sizes() == mine.sizes()) {
      if (!magnitude) {
        std::vector<at::Tensor> abs_shards;
        for (const at::Tensor& t : shards) abs_shards.push_back(t.abs());
        magnitude = RedistributeInternal(
            DTensor::FromLocal(MakeLocalTensor(ranks, abs_shards), r.src().mesh(),
                               r.src().placements(), r.src().shape()),
            r.dst().placements());
      }
      const at::Tensor bound =
          LocalShard(magnitude->to_local(), s.rank).to(at::kDouble) * (2.0 * (reduced - 1) * eps) +
          1e-300;
      const at::Tensor diff = (recorded[i].to(at::kDouble) - mine.to(at::kDouble)).abs();
      if (diff.le(bound).all().item<bool>()) {
        o.notes.push_back(StrCat("rank ", s.rank,
                                 ": equal within floating-point summation order (max |diff| ",
                                 diff.max().item<double>(), ")"));
        continue;
      }
    }
    o.differing_ranks.push_back(s.rank);
    o.problems.push_back(StrCat("shard: rank ", s.rank, " holds ", *s.hash, " ",
                                IntListToString(s.local_shape), " after the run; dtsim computes ",
                                h, " ", IntListToString(mine.sizes().vec())));
  }
}

std::string Title(const RedistributionEvent& r) {
  const std::string what = CallText(r);
  std::string mesh = r.src().mesh().ToString();
  if (!r.submesh_dims.empty()) {
    mesh = r.src().mesh().root().ToString() + "[\"";
    for (size_t i = 0; i < r.submesh_dims.size(); ++i)
      mesh += (i ? "\", \"" : "") + r.submesh_dims[i];
    mesh += "\"]";
  }
  return StrCat("#", r.index, " ", what, "  ", mesh, " ", IntListToString(r.src().shape()), " ",
                ToString(r.src().dtype()), "  ", ToString(r.src().placements()), " -> ",
                ToString(r.dst().placements()));
}

nlohmann::json ToJson(const Outcome& o) {
  const RedistributionEvent& r = *o.rec;
  nlohmann::json recorded = nlohmann::json::array(), mine = nlohmann::json::array();
  for (const CollectiveEvent& c : r.collectives) {
    recorded.push_back({{"op", ToString(c.kind)},
                        {"groups", c.groups},
                        {"ranks", c.ranks},
                        {"input_bytes", c.input_bytes},
                        {"output_bytes", c.output_bytes}});
  }
  for (const Expected& e : o.expected) {
    std::vector<int64_t> ranks, in, out;
    for (const auto& [rank, bytes] : e.input_bytes) {
      ranks.push_back(rank);
      in.push_back(bytes);
      out.push_back(e.output_bytes.at(rank));
    }
    mine.push_back({{"op", ToString(e.kind)},
                    {"groups", e.groups},
                    {"ranks", ranks},
                    {"input_bytes", in},
                    {"output_bytes", out},
                    {"gloo_all_gather_fallback", e.gloo_fallback}});
  }
  return {{"index", r.index},
          {"call", r.call},
          {"op", r.op.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.op)},
          {"arg", r.arg ? nlohmann::json(*r.arg) : nlohmann::json(nullptr)},
          {"mesh", r.src().mesh().root().ToString()},
          {"submesh", r.submesh_dims},
          {"shape", r.src().shape()},
          {"dtype", ToString(r.src().dtype())},
          {"from", ToString(r.src().placements())},
          {"to", ToString(r.dst().placements())},
          {"equal", o.equal() && o.unchecked_ranks.empty()},
          {"data", o.data},
          {"unchecked_ranks", o.unchecked_ranks},
          {"unchecked", o.unchecked},
          {"shards_checked", o.shards_checked},
          {"differing_ranks", o.differing_ranks},
          {"problems", o.problems},
          {"notes", o.notes},
          {"collectives", {{"recorded", recorded}, {"dtsim", mine}}}};
}

}  // namespace

int RunReplay(const Args& args) {
  std::vector<std::string> files;
  bool json = false;
  int64_t limit = 20;
  po::options_description desc("dtsim replay options");
  desc.add_options()("help,h", "show this help")("json", po::bool_switch(&json),
                                                 "print the result as JSON")(
      "limit", po::value(&limit)->default_value(limit),
      "print at most this many differing redistributions");
  const po::variables_map vm = ParseOptionsWithFiles(args, desc, &files);
  if (vm.count("help")) {
    std::cout
        << "usage: dtsim replay RECORDING.json [--json] [--limit 20]\n"
           "Re-runs every redistribution of a run recorded with dtsim.record (Python) and says\n"
           "where the real run's shards, layouts, collectives and bytes differ from dtsim's.\n"
           "Exit 0: equal; 1: differs; 2: invalid recording; 3: nothing differs but some shards\n"
           "could not be checked (their hashes are unavailable in the recording).\n"
        << desc;
    return 0;
  }
  if (files.size() != 1) throw InputError("file", StrCat("give one recording, got ", files.size()));
  if (limit < 1 || limit > 1000000) {
    throw InputError("limit",
                     StrCat(limit, " is out of range: print 1 to 1000000 redistributions"));
  }
  const std::string& path = files[0];
  const std::string text = ReadInputFile(path, "recording", kMaxRecordingBytes);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError("recording", StrCat("'", ExcerptText(path), "' is empty"));
  nlohmann::json doc = ParseJsonText(text, "recording", StrCat("'", ExcerptText(path), "'"));
  const std::map<size_t, std::vector<Unavailable>> unavailable = TakeUnavailable(doc, path);
  // The data file first (its size bounds the data entries); a missing one is not an error: replay
  // then checks layouts, collectives and bytes only, and says so.
  std::string data;
  std::optional<int64_t> data_size;
  std::string data_note;
  Recording rec = WithFileName(path, [&] {
    Recording probe = RecordingFromJson(doc, std::nullopt);
    if (!probe.data_file.empty()) {
      const std::string data_path =
          (std::filesystem::path(path).parent_path() / probe.data_file).string();
      struct stat st;
      struct stat own;
      if (::stat(data_path.c_str(), &st) != 0) {
        data_note = StrCat("the data file '", ExcerptText(data_path),
                           "' is missing: shards are not recomputed");
      } else if (::stat(path.c_str(), &own) == 0 && st.st_dev == own.st_dev &&
                 st.st_ino == own.st_ino) {
        throw InputError("recording", StrCat("meta.data_file: '", ExcerptText(probe.data_file),
                                             "' is the recording itself, not its data file"));
      } else {
        data = ReadInputFile(data_path, "recording", kMaxRecordingDataBytes);
        data_size = static_cast<int64_t>(data.size());
      }
    }
    return data_size ? RecordingFromJson(doc, data_size) : probe;
  });
  // dtsim run's simulated ranks hold CPU device meshes: upstream takes its CPU path there too.
  const bool gloo = rec.backend == "torch-gloo" || rec.backend == "dtsim-run";
  const bool groups_exact = rec.backend != "torch-local";
  std::vector<Outcome> outcomes;
  int64_t without_data = 0;
  int64_t unchecked_shards = 0;
  for (size_t i = 0; i < rec.redistributions.size(); ++i) {
    const RedistributionEvent& r = rec.redistributions[i];
    Outcome o;
    o.rec = &r;
    bool source_gone = false;
    if (const auto it = unavailable.find(i); it != unavailable.end()) {
      for (const Unavailable& u : it->second) source_gone |= u.before;
      for (const Unavailable& u : it->second) {
        if (u.before) {
          o.unchecked.push_back(StrCat("rank ", u.rank, "'s source hash is unavailable (", u.reason,
                                       "): no rank's result is recomputed"));
        } else if (!source_gone) {
          o.unchecked_ranks.push_back(u.rank);
          o.unchecked.push_back(StrCat(
              "rank ", u.rank, ": result not checked, its hash is unavailable (", u.reason, ")"));
        }
      }
      if (source_gone) {
        for (const RankState& s : r.ranks_after()) o.unchecked_ranks.push_back(s.rank);
      }
      std::sort(o.unchecked_ranks.begin(), o.unchecked_ranks.end());
      o.unchecked_ranks.erase(std::unique(o.unchecked_ranks.begin(), o.unchecked_ranks.end()),
                              o.unchecked_ranks.end());
      unchecked_shards += static_cast<int64_t>(o.unchecked_ranks.size());
    }
    CompareLayouts(o);
    std::set<std::pair<bool, int64_t>> hashless;
    if (const auto it = unavailable.find(i); it != unavailable.end()) {
      for (const Unavailable& u : it->second) hashless.insert({u.before, u.rank});
    }
    CompareReplicas(o, hashless);
    o.expected = ExpectedCollectives(r, gloo);
    CompareCollectives(o, groups_exact);
    if (r.data && data_size && !source_gone) {
      CompareShards(o, data);
    } else if (!source_gone) {
      ++without_data;
    }
    outcomes.push_back(std::move(o));
  }
  const auto first_bad =
      std::find_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return !o.equal(); });
  const bool equal = first_bad == outcomes.end();
  int64_t shards_checked = 0;
  for (const Outcome& o : outcomes) shards_checked += o.shards_checked;
  // Not one shard recomputed (no data file, or max_data_bytes=0): layouts, collectives and bytes
  // were compared, values never; that is no verdict of "equal".
  const bool nothing_checked = without_data > 0 && shards_checked == 0;
  const RunCheck run = rec.collectives ? CheckRunCollectives(*rec.collectives) : RunCheck{};
  const bool run_consistent = run.problems.empty();
  // 0: every shard checked and equal; 1: a difference; 3: none found, but shards unchecked.
  const int verdict = !equal || !run_consistent                 ? 1
                      : unchecked_shards > 0 || nothing_checked ? 3
                                                                : 0;
  if (json) {
    nlohmann::json out = {
        {"format", "dtsim-replay"},
        {"version", 1},
        {"recording", path},
        {"backend", rec.backend},
        {"torch_version", rec.torch_version},
        {"world_size", rec.world_size},
        {"equal", equal && run_consistent && unchecked_shards == 0 && !nothing_checked},
        {"shards_checked", shards_checked},
        {"unchecked_shards", unchecked_shards},
        {"redistributions_without_data", without_data},
        // the run's collectives outside redistributions: null when the recording lists none;
        // those whose members must end equal (all_reduce, all_gather, broadcast) are checked
        {"run_collectives",
         rec.collectives ? nlohmann::json(rec.collectives->size()) : nlohmann::json(nullptr)},
        {"run_collectives_checked", run.checked},
        {"run_collective_problems", run.problems},
        {"note", data_note},
        {"redistributions", nlohmann::json::array()}};
    for (const Outcome& o : outcomes) out["redistributions"].push_back(ToJson(o));
    std::cout << SafeDump(out) << "\n";
    return verdict;
  }
  std::cout << "replay of " << path << ": " << rec.backend << ", " << rec.world_size << " ranks"
            << (rec.torch_version.empty() ? "" : ", torch " + rec.torch_version) << ", "
            << rec.redistributions.size() << " redistribution"
            << (rec.redistributions.size() == 1 ? "" : "s") << "\n";
  if (!data_note.empty()) std::cout << "note: " << data_note << "\n";
  if (without_data > 0 && data_note.empty()) {
    std::cout
        << "note: " << without_data << " redistribution" << (without_data == 1 ? "" : "s")
        << " past the recorder's data cap: layouts, collectives and bytes checked, shards not "
           "recomputed (raise max_data_bytes in dtsim.record)\n";
  }
  int64_t printed = 0;
  for (const Outcome& o : outcomes) {
    std::string fallback;
    for (const Expected& e : o.expected) {
      if (e.gloo_fallback) fallback = " (all_to_all runs as all_gather on Gloo, as upstream)";
    }
    if (o.equal() && !o.unchecked_ranks.empty()) {
      std::cout << "  " << Title(*o.rec) << "  NOT CHECKED on rank"
                << (o.unchecked_ranks.size() == 1 ? " " : "s ");
      for (size_t i = 0; i < o.unchecked_ranks.size(); ++i)
        std::cout << (i ? ", " : "") << o.unchecked_ranks[i];
      std::cout << "; "
                << (o.data ? StrCat(o.shards_checked, " other shard",
                                    o.shards_checked == 1 ? "" : "s", " equal, ")
                           : "")
                << "layouts and " << o.expected.size() << " collective"
                << (o.expected.size() == 1 ? "" : "s") << " equal" << fallback << ":\n";
      for (const std::string& u : o.unchecked) std::cout << "    " << u << "\n";
      continue;
    }
    if (o.equal()) {
      std::cout << "  " << Title(*o.rec) << "  equal: "
                << (o.data ? StrCat(o.shards_checked, " shards, ") : std::string("layouts, "))
                << o.expected.size() << " collective" << (o.expected.size() == 1 ? "" : "s")
                << fallback
                << (o.notes.empty()
                        ? ""
                        : "; summation order differs on " + std::to_string(o.notes.size()) +
                              " rank" + (o.notes.size() == 1 ? "" : "s") + " (within bounds)")
                << "\n";
      continue;
    }
    if (printed++ >= limit) continue;
    std::cout << "  " << Title(*o.rec) << "  DIFFERS:\n";
    for (const std::string& p : o.problems) std::cout << "    " << p << "\n";
    for (const std::string& u : o.unchecked) std::cout << "    not checked: " << u << "\n";
  }
  if (rec.collectives) {
    std::cout << "  run collectives: " << run.checked << " of " << rec.collectives->size()
              << " checked (each all_reduce, all_gather and broadcast leaves its group equal), "
              << run.unchecked << " not checkable from hashes (each member's own output)"
              << (run_consistent ? "" : "; INCONSISTENT:") << "\n";
    for (size_t i = 0; i < run.problems.size() && static_cast<int64_t>(i) < limit; ++i)
      std::cout << "    " << run.problems[i] << "\n";
  }
  if (equal && !run_consistent) {
    std::cout
        << "verdict: the recorded run's collectives are inconsistent; first at run collective "
        << run.first_index << ", rank" << (run.first_ranks.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < run.first_ranks.size(); ++i)
      std::cout << (i ? ", " : "") << run.first_ranks[i];
    std::cout << "\n";
    return verdict;
  }
  if (equal && unchecked_shards > 0) {
    std::cout << "verdict: no difference found, but " << unchecked_shards << " shard"
              << (unchecked_shards == 1 ? " was" : "s were")
              << " not checked (the recorder could not hash "
              << (unchecked_shards == 1 ? "it" : "them")
              << "; above): the recorded run is not shown equal to dtsim's simulation\n";
    return verdict;
  }
  if (equal && nothing_checked) {
    std::cout << "verdict: no shard was checked (no shard data: the note above says why); "
                 "layouts, collectives and bytes are equal, but the recorded run is not shown "
                 "equal to dtsim's simulation\n";
    return verdict;
  }
  if (equal) {
    // Replay recomputes redistributions only: the verdict names what else the run did and that it
    // was not checked here.
    std::cout << "verdict: the recorded run's redistributions equal dtsim's simulation ("
              << outcomes.size() << " redistribution" << (outcomes.size() == 1 ? "" : "s") << "); "
              << (rec.collectives
                      ? StrCat("of the run's ", rec.collectives->size(),
                               " collectives (FSDP2, DDP, c10d calls alike), ", run.checked,
                               " leave their groups equal and ", run.unchecked,
                               " are not checked by replay: dtsim trace-diff compares them with "
                               "another run's")
                      : std::string("collectives outside redistributions (FSDP2, DDP, direct c10d "
                                    "calls) are not in the recording, so not checked"))
              << "\n";
    return 0;
  }
  const Outcome& bad = *first_bad;
  std::cout
      << "verdict: the recorded run differs from dtsim's simulation; first at redistribution #"
      << bad.rec->index << " (" << bad.rec->call << (bad.rec->op.empty() ? "" : " " + bad.rec->op)
      << ")";
  if (!bad.differing_ranks.empty()) {
    std::cout << ", rank" << (bad.differing_ranks.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < bad.differing_ranks.size(); ++i)
      std::cout << (i ? ", " : "") << bad.differing_ranks[i];
  }
  std::cout << "\n";
  if (unchecked_shards > 0) {
    std::cout << "note: " << unchecked_shards << " shard"
              << (unchecked_shards == 1 ? " was" : "s were")
              << " not checked (the recorder could not hash them)\n";
  }
  return verdict;
}

}  // namespace dtsim::cli
