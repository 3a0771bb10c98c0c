// Model traces for the viewer's tests, made without LibTorch: a small model of `layers` blocks
// ("Model" > "layers.L" > "layers.L.attn", "layers.L.mlp") on any mesh, with every kind of event —
// parameters, forward calls, ops with nested implicit redistributions (one far longer than its op,
// so the export scales it), standalone collectives of a style and of fully_shard, the loss,
// backward_begin in reverse order with ops and collectives after them, gradients — and runs of
// events at equal times (the export must still nest them strictly). Hashes and sketches per rank
// unless `data` is false (a metadata-only trace). The result passes ModelTraceFromJson.
//
// Example: MakeModelTrace({2, 4}, {"dp", "tp"}, 2) has 8 ranks, 2 blocks; its events are
// parameters (4), forward (begin Model, a fully_shard all_gather, per block: begin, begin attn,
// aten::mm with 2 implicit all_gathers, aten::add, end attn, begin mlp, aten::mm with 1, a
// RowwiseParallel reduce_scatter, end mlp, end block), end Model, loss, backward, gradients (4).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "dtsim/trace/model_trace.h"

namespace dtsim::viewer::testing {

// A hash-like text for rank `rank` at event `event` (splitmix64, so the first hex digits differ).
inline std::string FakeHash(int64_t event, int64_t rank, int64_t salt = 0) {
  uint64_t z = static_cast<uint64_t>(event) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ull +
               static_cast<uint64_t>(salt) * 0x94D049BB133111EBull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh3:%016llx", static_cast<unsigned long long>(z));
  return buf;
}

// The groups along the last mesh dim ("tp") or the first ("dp") of a row-major mesh.
inline std::vector<std::vector<int64_t>> GroupsAlong(const std::vector<int64_t>& shape, bool last) {
  int64_t world = 1;
  for (int64_t s : shape) world *= s;
  const int64_t size = last ? shape.back() : shape.front();
  const int64_t stride = last ? 1 : world / shape.front();
  std::vector<std::vector<int64_t>> groups;
  std::vector<uint8_t> seen(static_cast<size_t>(world), 0);
  for (int64_t r = 0; r < world; ++r) {
    if (seen[r]) continue;
    std::vector<int64_t> g;
    for (int64_t k = 0; k < size; ++k) {
      g.push_back(r + k * stride);
      seen[r + k * stride] = 1;
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

inline ModelTrace MakeModelTrace(const std::vector<int64_t>& shape,
                                 const std::vector<std::string>& names, int layers,
                                 bool data = true) {
  ModelTrace t;
  int64_t world = 1;
  for (int64_t s : shape) world *= s;
  t.meta.command = "model";
  t.meta.argv = "test model trace";
  t.meta.world_size = world;
  t.meta.data = data;
  t.model = {{"layers", layers}, {"plan", "fsdp+tp"}};
  t.mesh_shape = shape;
  t.mesh_names = names;
  const auto tp = GroupsAlong(shape, true);
  const auto dp = GroupsAlong(shape, false);
  double now = 0;
  auto tensor = [&](int64_t event) {
    WorldTensor x;
    x.placements = "[S(0)]";
    x.shape = {4, 8};
    if (data) {
      for (int64_t r = 0; r < world; ++r) {
        x.hashes.push_back(FakeHash(event, r));
        x.sketches.push_back({static_cast<double>(event), static_cast<double>(r), 10.0});
      }
    }
    return x;
  };
  // Every third event happens at the same time as the one before (the export must separate them).
  auto add = [&](RunEvent e) {
    const auto index = static_cast<int64_t>(t.events.size());
    if (index % 3 != 0) now += 10;
    e.t_us = now;
    const bool has_tensor =
        e.kind == RunEvent::Kind::kParameter || e.kind == RunEvent::Kind::kModuleBegin ||
        e.kind == RunEvent::Kind::kModuleEnd || e.kind == RunEvent::Kind::kBackwardBegin ||
        e.kind == RunEvent::Kind::kLoss || e.kind == RunEvent::Kind::kGradient;
    if (has_tensor) e.tensor = tensor(index);
    t.events.push_back(std::move(e));
  };
  auto collective = [&](CollectiveKind kind, bool along_tp, double est_us, const std::string& cause,
                        bool implicit) {
    CollectiveEvent c;
    c.kind = kind;
    c.mesh_dim = along_tp ? names.back() : names.front();
    c.groups = along_tp ? tp : dp;
    c.max_bytes_sent = 1024;
    c.max_bytes_received = 4096;
    c.est_us = est_us;
    if (implicit) {
      c.from = "[S(1)]";
      c.to = "[R]";
    }
    c.cause = cause;
    c.implicit = implicit;
    return c;
  };
  auto event = [](RunEvent::Kind kind, const std::string& phase, const std::string& module) {
    RunEvent e;
    e.kind = kind;
    e.pass = phase;
    e.module = module;
    return e;
  };
  auto op = [&](const std::string& phase, const std::string& module, const std::string& name,
                std::vector<CollectiveEvent> cs) {
    RunEvent e = event(RunEvent::Kind::kOp, phase, module);
    e.op = name;
    e.args = {"[S(0)]", "[S(1)]"};
    e.results = {"[S(0)]"};
    e.collectives = std::move(cs);
    add(std::move(e));
  };
  auto standalone = [&](const std::string& phase, const std::string& module, CollectiveEvent c) {
    RunEvent e = event(RunEvent::Kind::kCollective, phase, module);
    e.collectives = {std::move(c)};
    add(std::move(e));
  };
  auto begin = [&](const std::string& module, const std::string& type) {
    RunEvent e = event(RunEvent::Kind::kModuleBegin, "forward", module);
    e.type = type;
    add(std::move(e));
  };
  auto end = [&](const std::string& module) {
    add(event(RunEvent::Kind::kModuleEnd, "forward", module));
  };
  std::vector<std::string> params;
  for (int l = 0; l < layers; ++l) {
    params.push_back("layers." + std::to_string(l) + ".attn.weight");
    params.push_back("layers." + std::to_string(l) + ".mlp.weight");
  }
  for (const std::string& p : params) {
    RunEvent e = event(RunEvent::Kind::kParameter, "setup", "");
    e.name = p;
    add(std::move(e));
  }
  begin("Model", "Model");
  standalone(
      "forward", "Model",
      collective(CollectiveKind::kAllGather, false, 7, "fully_shard all-gather of Model", false));
  for (int l = 0; l < layers; ++l) {
    const std::string block = "layers." + std::to_string(l);
    begin(block, "Block");
    begin(block + ".attn", "Attention");
    op("forward", block + ".attn", "aten::mm",
       {collective(CollectiveKind::kAllGather, true, 3, "aten::mm arg 0", true),
        collective(CollectiveKind::kAllGather, true, 4, "aten::mm arg 1", true)});
    op("forward", block + ".attn", "aten::add.Tensor", {});
    end(block + ".attn");
    begin(block + ".mlp", "MLP");
    // Far longer than the 10 us its op takes: the export scales it down to fit.
    op("forward", block + ".mlp", "aten::mm",
       {collective(CollectiveKind::kAllReduce, true, 1e6, "aten::mm arg 1", true)});
    standalone("forward", block + ".mlp",
               collective(CollectiveKind::kReduceScatter, true, 8,
                          "RowwiseParallel output of " + block + ".mlp", false));
    end(block + ".mlp");
    end(block);
  }
  end("Model");
  add(event(RunEvent::Kind::kLoss, "forward", ""));
  add(event(RunEvent::Kind::kBackwardBegin, "backward", "Model"));
  for (int l = layers - 1; l >= 0; --l) {
    const std::string block = "layers." + std::to_string(l);
    add(event(RunEvent::Kind::kBackwardBegin, "backward", block));
    add(event(RunEvent::Kind::kBackwardBegin, "backward", block + ".mlp"));
    op("backward", block + ".mlp", "aten::mm", {});
    standalone("backward", block + ".mlp",
               collective(CollectiveKind::kAllGather, true, 8,
                          "backward of RowwiseParallel output of " + block + ".mlp", false));
    add(event(RunEvent::Kind::kBackwardBegin, "backward", block + ".attn"));
    op("backward", block + ".attn", "aten::mm",
       {collective(CollectiveKind::kReduceScatter, true, 5, "aten::mm arg 0", true)});
    standalone("backward", block + ".attn",
               collective(CollectiveKind::kReduceScatter, false, 9,
                          "fully_shard reduce-scatter of " + block, false));
  }
  for (const std::string& p : params) {
    RunEvent e = event(RunEvent::Kind::kGradient, "end", "");
    e.name = p;
    add(std::move(e));
  }
  return t;
}

}  // namespace dtsim::viewer::testing
