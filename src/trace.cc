// Trace recording, hashing, validation and atomic writing.
#include "dtsim/trace.h"

#include <ATen/ATen.h>
#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "dtsim/aten_dtype.h"
#include "dtsim/dtensor.h"
#include "dtsim/error.h"
#include "dtsim/layout_report.h"
#include "dtsim/local_tensor.h"

namespace dtsim {

std::string ShardHash(const at::Tensor& shard) {
  at::Tensor c = shard.contiguous();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string header = StrCat(c10::toString(c.scalar_type()), IntListToString(c.sizes().vec()));
  XXH3_64bits_update(state, header.data(), header.size());
  if (c.numel() > 0) XXH3_64bits_update(state, c.data_ptr(), c.numel() * c.element_size());
  const XXH64_hash_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "xxh3:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json SpecToJson(const DTensorSpec& spec) {
  return {{"mesh", {{"shape", spec.mesh().shape()}, {"names", spec.mesh().names()}, {"ranks", spec.mesh().ranks()}}},
          {"placements", ToString(spec.placements())},
          {"shape", spec.shape()},
          {"dtype", ToString(spec.dtype())}};
}

DTensorSpec SpecFromJson(const nlohmann::json& json) {
  try {
    const auto& mesh = json.at("mesh");
    DeviceMesh m = DeviceMesh::Create(mesh.at("shape").get<std::vector<int64_t>>(),
                                      mesh.at("names").get<std::vector<std::string>>(),
                                      mesh.at("ranks").get<std::vector<int64_t>>());
    return DTensorSpec::Create(m, ParsePlacements(json.at("placements").get<std::string>()),
                               json.at("shape").get<std::vector<int64_t>>(),
                               ParseDType(json.at("dtype").get<std::string>()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError("trace", StrCat("a spec is malformed: ", e.what()));
  }
}

nlohmann::json RankStatesToJson(const DTensorSpec& spec, const at::Tensor& local) {
  nlohmann::json ranks = nlohmann::json::array();
  MeshView view(spec.mesh());
  for (int64_t rank : LocalRanks(local)) {
    RankLayout l = ComputeRankLayout(spec.shape(), spec.mesh().shape(), view.Coordinate(rank), spec.placements(), rank);
    at::Tensor shard = LocalShard(local, rank);
    ranks.push_back({{"rank", rank},
                     {"coordinate", l.coordinate},
                     {"local_shape", shard.sizes().vec()},
                     {"global_offset", l.global_offset},
                     {"hash", ShardHash(shard)}});
  }
  return ranks;
}

nlohmann::json CollectiveToJson(const CollectiveRecord& r) {
  return {{"op", r.op},
          {"groups", r.groups.groups},
          {"ranks", r.ranks},
          {"input_shapes", r.input_shapes},
          {"output_shapes", r.output_shapes},
          {"bytes_sent", r.bytes_sent},
          {"bytes_received", r.bytes_received}};
}

TraceRecorder::TraceRecorder(nlohmann::json meta) {
  meta["format"] = kTraceFormat;
  meta["version"] = kTraceVersion;
  trace_ = {{"format", kTraceFormat}, {"version", kTraceVersion}, {"meta", meta}, {"steps", nlohmann::json::array()}};
}

void TraceRecorder::OnCollective(const CollectiveRecord& record) { pending_.push_back(CollectiveToJson(record)); }

void TraceRecorder::SetInitial(const DTensorSpec& spec, const at::Tensor& local) {
  trace_["initial"] = {{"spec", SpecToJson(spec)}, {"ranks", RankStatesToJson(spec, local)}};
  pending_ = nlohmann::json::array();
}

void TraceRecorder::EndStep(nlohmann::json step, const DTensorSpec& spec_after, const at::Tensor& local_after) {
  step["index"] = trace_["steps"].size();
  step["collectives"] = pending_;
  step["placements_after"] = ToString(spec_after.placements());
  step["ranks_after"] = RankStatesToJson(spec_after, local_after);
  trace_["steps"].push_back(std::move(step));
  pending_ = nlohmann::json::array();
}

void TraceRecorder::SetFinal(const DTensorSpec& spec, const at::Tensor& local, bool ok) {
  trace_["final"] = {{"spec", SpecToJson(spec)}, {"ranks", RankStatesToJson(spec, local)}};
  trace_["ok"] = ok;
}

void ValidateTrace(const nlohmann::json& trace) {
  if (!trace.is_object()) throw InputError("trace", "the file holds no JSON object");
  if (!trace.contains("format") || trace["format"] != kTraceFormat) {
    throw InputError("trace", StrCat("format is ", trace.contains("format") ? trace["format"].dump() : "missing",
                                     ", expected \"", kTraceFormat, "\""));
  }
  if (!trace.contains("version") || !trace["version"].is_number_integer()) {
    throw InputError("trace", "version is missing or not an integer");
  }
  if (trace["version"].get<int64_t>() != kTraceVersion) {
    throw InputError("trace", StrCat("version ", trace["version"].dump(), " is not supported (this dtsim reads version ",
                                     kTraceVersion, ")"));
  }
  for (const char* key : {"meta", "initial", "steps", "final"}) {
    if (!trace.contains(key)) throw InputError("trace", StrCat("field '", key, "' is missing"));
  }
  if (!trace["steps"].is_array()) throw InputError("trace", "field 'steps' is not a list");
}

nlohmann::json ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("trace", StrCat("cannot open '", path, "'"));
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError("trace", StrCat("'", path, "' is not valid JSON: ", e.what()));
  }
  ValidateTrace(trace);
  return trace;
}

void WriteJsonFileAtomically(const std::string& path, const nlohmann::json& json) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw InputError("trace", StrCat("cannot write '", path, "'"));
    out << json.dump(1) << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw InputError("trace", StrCat("writing '", path, "' failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError("trace", StrCat("cannot move the trace into place at '", path, "'"));
  }
}

}  // namespace dtsim
