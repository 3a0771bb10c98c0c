// Op traces (see include/dtsim/trace/op_trace.h).
#include "dtsim/trace/op_trace.h"

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {

nlohmann::json ToJson(const OpTrace& t) {
  nlohmann::json redistributions = nlohmann::json::array();
  for (const RedistributionEvent& r : t.redistributions) {
    redistributions.push_back(
        {{"op", r.op}, {"arg", r.arg.value_or(0)}, {"trace", ToJson(r.trace)}});
  }
  nlohmann::json out = {{"format", kOpTraceFormat}, {"version", kOpTraceVersion},
                        {"meta", ToJson(t.meta)},   {"op", t.op},
                        {"strategy", t.strategy},   {"redistributions", redistributions}};
  if (t.ok) out["ok"] = *t.ok;
  return out;
}

bool IsOpTrace(const nlohmann::json& json) {
  return json.is_object() && json.contains("format") && json["format"] == kOpTraceFormat;
}

OpTrace OpTraceFromJson(const nlohmann::json& json, const OpArgumentCheck& check) {
  if (!IsOpTrace(json)) {
    throw InputError(
        "trace",
        StrCat("format is ",
               json.is_object() && json.contains("format") ? Excerpt(json["format"]) : "missing",
               ", expected \"", kOpTraceFormat, "\""));
  }
  JsonReader r(json, "trace");
  const int64_t version = r.Int("version", 0, 1000000);
  if (version != kOpTraceVersion) {
    r.At("version").Fail(StrCat("version ", version, " is not supported (this dtsim reads version ",
                                kOpTraceVersion, ")"));
  }
  OpTrace t;
  t.meta = TraceMetaFromJson(r.At("meta"));
  if (t.meta.world_size < 1) {
    r.At("meta").At("world_size").Fail(StrCat(t.meta.world_size, "; an op runs on 1 rank or more"));
  }
  t.op = r.String("op");
  t.strategy = r.String("strategy");
  if (r.Has("ok")) t.ok = r.Bool("ok");
  const JsonReader list = r.At("redistributions");
  const size_t n = list.ArraySize();
  for (size_t i = 0; i < n; ++i) {
    const JsonReader item = list.At(i);
    item.ExpectObject();
    RedistributionEvent red;
    red.index = static_cast<int64_t>(i);
    red.call = "implicit";
    red.op = item.String("op");
    red.arg = item.Int("arg", 0, 1000000);
    if (check) {
      const std::string problem = check(red.op, *red.arg);
      if (!problem.empty()) item.Fail(problem);
    }
    try {
      red.trace = TraceFromJson(item.At("trace").json());
    } catch (const InputError& e) {
      // Name where in the op trace the inner trace's problem is.
      const std::string what = e.what();
      const std::string prefix = e.field() + ": ";
      item.At("trace").Fail(what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size())
                                                                        : what);
    }
    // Every redistribution of the op ran on the op's world.
    if (red.trace.meta.world_size != t.meta.world_size) {
      item.At("trace")
          .At("meta")
          .At("world_size")
          .Fail(StrCat(red.trace.meta.world_size, " ranks, but the op ran on ", t.meta.world_size));
    }
    t.redistributions.push_back(std::move(red));
  }
  return t;
}

std::vector<TraceDifference> DiffOpTraces(const OpTrace& a, const OpTrace& b, size_t limit) {
  std::vector<TraceDifference> out;
  auto whole = [&](const std::string& what) {
    TraceDifference d;
    d.where = "op";
    d.what = what;
    out.push_back(std::move(d));
  };
  if (a.op != b.op) whole(StrCat("the op differs: ", a.op, " vs ", b.op));
  if (a.strategy != b.strategy)
    whole(StrCat("the strategy differs: ", a.strategy, " vs ", b.strategy));
  if (a.redistributions.size() != b.redistributions.size()) {
    whole(StrCat(a.redistributions.size(), " vs ", b.redistributions.size(),
                 " implicit redistributions"));
  }
  const size_t n = std::min(a.redistributions.size(), b.redistributions.size());
  for (size_t i = 0; i < n && out.size() < limit; ++i) {
    const RedistributionEvent& x = a.redistributions[i];
    const RedistributionEvent& y = b.redistributions[i];
    const std::string prefix =
        StrCat("redistribution ", i + 1, " (", x.op, " arg ", x.arg.value_or(0), ")");
    if (x.op != y.op || x.arg != y.arg) {
      TraceDifference d;
      d.where = prefix;
      d.what = StrCat("moves ", y.op, " arg ", y.arg.value_or(0), " in the other trace");
      out.push_back(std::move(d));
      continue;
    }
    for (TraceDifference d : DiffTraces(x.trace, y.trace, limit - out.size())) {
      d.where = StrCat(prefix, ": ", d.where);
      out.push_back(std::move(d));
    }
  }
  if (out.size() > limit) out.resize(limit);
  if (a.ok != b.ok && out.size() < limit) {
    TraceDifference d;
    d.phase = TraceDifference::Phase::kFinal;
    d.where = "verdict";
    d.what = StrCat("ok ", a.ok ? (*a.ok ? "true" : "false") : "absent", " vs ",
                    b.ok ? (*b.ok ? "true" : "false") : "absent");
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace dtsim
