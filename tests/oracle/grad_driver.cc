// grad_driver: runs small compositions of ATen ops forward and backward on dtsim DTensors (the op
// layer's wrappers, dtsim/ops/dtensor_tensor.h) and writes the loss, the forward output placements
// and every leaf's gradient as JSON lines, one process for all cases. Used by
// tests/oracle/test_grad_oracle.py, which asks upstream PyTorch DTensor (LocalTensorMode) the same
// questions.
//
// Case (one JSON line on stdin):
//   {"comp": "linear_gelu_sum", "mesh": [2, 2],
//    "leaves": [{"name": "x", "shape": [6, 8], "placements": "S(0),R", "requires_grad": false},
//    ...]}
// Leaf k (0-based, in list order) holds the global values ((arange(numel) + 3k) mod 7 - 3) * 0.25
// in float32, made a DTensor with DistributeTensor (Replicate/Shard placements only). "softmax_nll"
// also builds a target: int64 values arange(batch) mod classes, replicated on every mesh dim.
//
// Compositions (the leaves each needs, in order):
//   linear_gelu_sum  x, w, b     hidden = gelu(matmul(x, w.t()) + b);          loss = hidden.sum()
//   mm_sum           x, w        hidden = matmul(x, w);                        loss = hidden.sum()
//   softmax_nll      x, w        hidden = matmul(x, w) (logits);               loss =
//   nll_loss(log_softmax(hidden, -1), target) layernorm_sum    x, w, b     hidden = layer_norm(x,
//   [d], w, b);            loss = hidden.sum() mlp              x, w1, w2   hidden =
//   matmul(relu(matmul(x, w1)), w2);     loss = hidden.sum()
//
// Output: {"loss": 1.25, "output_placements": "[P(sum)]", "hidden_placements": "[S(0), R]",
//          "grads": {"w": {"placements": "[S(0), R]", "shape": [5, 8], "values": [...]} , "x":
//          null, ...}}
// (a leaf that requires grad but got none is null; leaves that do not require grad are absent), or
// {"error": "..."} when anything throws.
//
// Each case starts with an empty sharding-decision cache (ops::ClearShardingCache), so a case's
// answer does not depend on the cases before it: dtsim's cache key leaves the mesh out, so a
// decision made on one mesh is reused on another mesh for the same global shapes and placements
// (see test_grad_oracle.py, CROSS_CASE_PROBLEMS).
// `--shared-cache` keeps the cache across cases, as one program would.
#include <ATen/ATen.h>

#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/ops/dtensor_tensor.h"

namespace {

using nlohmann::json;

at::Tensor LeafValues(int64_t k, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  at::Tensor v = (at::arange(numel, at::kLong) + 3 * k).remainder(7) - 3;
  return (v.to(at::kFloat) * 0.25).reshape(shape).contiguous();
}

json Flat(const at::Tensor& t) {
  at::Tensor d = t.contiguous().to(at::kDouble);
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

std::string PlacementsOf(const at::Tensor& t) {
  return dtsim::ToString(dtsim::ops::GetDTensor(t).placements());
}

json Run(const json& c) {
  dtsim::DeviceMesh mesh = dtsim::DeviceMesh::Create(c.at("mesh").get<std::vector<int64_t>>());
  const std::string comp = c.at("comp");
  std::vector<std::string> names;
  std::vector<at::Tensor> leaves;
  std::vector<bool> wants_grad;
  for (size_t k = 0; k < c.at("leaves").size(); ++k) {
    const json& l = c.at("leaves")[k];
    std::vector<int64_t> shape = l.at("shape").get<std::vector<int64_t>>();
    dtsim::Placements placements = dtsim::ParsePlacements(l.at("placements").get<std::string>());
    at::Tensor t = dtsim::ops::AsTensor(
        dtsim::DistributeTensor(LeafValues(static_cast<int64_t>(k), shape), mesh, placements));
    const bool rg = l.value("requires_grad", true);
    if (rg) t.requires_grad_();
    names.push_back(l.at("name"));
    leaves.push_back(t);
    wants_grad.push_back(rg);
  }
  auto leaf = [&](const std::string& name) -> const at::Tensor& {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return leaves[i];
    throw std::runtime_error("case has no leaf '" + name + "'");
  };

  at::Tensor hidden, loss;
  if (comp == "linear_gelu_sum") {
    hidden = at::gelu(at::matmul(leaf("x"), leaf("w").t()) + leaf("b"));
    loss = hidden.sum();
  } else if (comp == "mm_sum") {
    hidden = at::matmul(leaf("x"), leaf("w"));
    loss = hidden.sum();
  } else if (comp == "softmax_nll") {
    hidden = at::matmul(leaf("x"), leaf("w"));
    const int64_t batch = hidden.size(0), classes = hidden.size(1);
    std::vector<dtsim::Placement> replicate(mesh.ndim(), dtsim::Placement::Replicate());
    at::Tensor target = dtsim::ops::AsTensor(
        dtsim::DistributeTensor(at::arange(batch, at::kLong).remainder(classes), mesh, replicate));
    loss = at::nll_loss(at::log_softmax(hidden, -1), target);
  } else if (comp == "layernorm_sum") {
    const at::Tensor& x = leaf("x");
    hidden = at::layer_norm(x, {x.size(-1)}, leaf("w"), leaf("b"));
    loss = hidden.sum();
  } else if (comp == "mlp") {
    hidden = at::matmul(at::relu(at::matmul(leaf("x"), leaf("w1"))), leaf("w2"));
    loss = hidden.sum();
  } else {
    throw std::runtime_error("unknown composition '" + comp + "'");
  }
  json res;
  res["hidden_placements"] = PlacementsOf(hidden);
  res["output_placements"] = PlacementsOf(loss);
  res["loss"] = dtsim::ops::GetDTensor(loss).FullTensor().item<double>();
  loss.backward();
  res["grads"] = json::object();
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!wants_grad[i]) continue;
    at::Tensor g = leaves[i].grad();
    if (!g.defined()) {
      res["grads"][names[i]] = nullptr;
      continue;
    }
    dtsim::DTensor dg = dtsim::ops::GetDTensor(g, names[i] + ".grad");
    at::Tensor full = dg.FullTensor();
    res["grads"][names[i]] = {
        {"placements", dtsim::ToString(dg.placements())},
        {"shape", std::vector<int64_t>(full.sizes().begin(), full.sizes().end())},
        {"values", Flat(full)}};
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  bool shared_cache = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--shared-cache") {
      shared_cache = true;
    } else {
      std::cerr << "usage: dtsim_grad_driver [--shared-cache] < cases.jsonl\n";
      return 2;
    }
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (!shared_cache) dtsim::ops::ClearShardingCache();
    json res;
    try {
      res = Run(json::parse(line));
    } catch (const std::exception& e) {
      std::string what = e.what();
      // c10::Error appends a C++ backtrace after the message: keep the first lines only.
      if (what.size() > 2000) what.resize(2000);
      res = {{"error", what}};
    }
    std::cout << res.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}
