// collectives_driver: runs dtsim's simulated collectives on JSON-lines cases (stdin) and writes
// each rank's output as JSON lines (stdout), one process for all cases. Used by
// tests/oracle/test_collectives_oracle.py.
//
// Case:   {"op": "all_reduce", "mesh": [2, 2], "mesh_dim": 1, "dtype": "float32" | "int64",
//          "shapes": [[2, 3], ...] (per rank), "values": [[...], ...] (per rank, flat, row-major),
//          "reduce_op": "sum", "dim": 0, "split_dim": 0, "concat_dim": 1, "src": 0}
// Output: {"shapes": [[...], ...], "values": [[...], ...]} or {"error": "<InputError text>"}.
#include <ATen/ATen.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/tensor/local_tensor.h"

namespace {

using nlohmann::json;

at::Tensor ShardFromJson(const json& shape, const json& values, at::ScalarType dtype) {
  std::vector<int64_t> sizes = shape.get<std::vector<int64_t>>();
  if (dtype == at::kLong) {
    std::vector<int64_t> v = values.get<std::vector<int64_t>>();
    return at::tensor(v, at::kLong).reshape(sizes).clone();
  }
  std::vector<double> v = values.get<std::vector<double>>();
  return at::tensor(v, at::kDouble).to(dtype).reshape(sizes).clone();
}

json ShardToJson(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (at::isIntegralType(c.scalar_type(), true)) {
    at::Tensor l = c.to(at::kLong);
    return std::vector<int64_t>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
  }
  at::Tensor d = c.to(at::kDouble);
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

json Run(const json& c, dtsim::Collectives& coll) {
  dtsim::DeviceMesh mesh = dtsim::DeviceMesh::Create(c.at("mesh").get<std::vector<int64_t>>());
  dtsim::GroupSet groups = dtsim::GroupSet::AlongMeshDim(mesh, c.at("mesh_dim").get<int64_t>());
  at::ScalarType dtype = c.value("dtype", "float32") == "int64" ? at::kLong : at::kFloat;
  std::vector<int64_t> ranks;
  std::vector<at::Tensor> shards;
  for (size_t r = 0; r < c.at("shapes").size(); ++r) {
    ranks.push_back(static_cast<int64_t>(r));
    shards.push_back(ShardFromJson(c.at("shapes")[r], c.at("values")[r], dtype));
  }
  at::Tensor in = dtsim::MakeLocalTensor(ranks, shards);
  const std::string op = c.at("op");
  auto reduce_op = [&] {
    auto parsed = dtsim::FindReduceOp(c.value("reduce_op", "sum"));
    if (!parsed)
      throw dtsim::InputError("reduce_op",
                              "unknown reduce op " + c.value("reduce_op", std::string()));
    return *parsed;
  };
  at::Tensor out;
  if (op == "all_gather") {
    out = coll.AllGather(in, groups, c.at("dim"));
  } else if (op == "reduce_scatter") {
    out = coll.ReduceScatter(in, groups, reduce_op(), c.at("dim"));
  } else if (op == "all_reduce") {
    out = coll.AllReduce(in, groups, reduce_op());
  } else if (op == "all_to_all") {
    out = coll.AllToAll(in, groups, c.at("split_dim"), c.at("concat_dim"));
  } else if (op == "broadcast") {
    out = coll.Broadcast(in, groups, c.at("src"));
  } else {
    throw dtsim::InputError("op", "unknown collective '" + op + "'");
  }
  json res = {{"shapes", json::array()}, {"values", json::array()}};
  for (int64_t r : ranks) {
    at::Tensor s = dtsim::LocalShard(out, r);
    res["shapes"].push_back(std::vector<int64_t>(s.sizes().begin(), s.sizes().end()));
    res["values"].push_back(ShardToJson(s));
  }
  return res;
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  auto coll = dtsim::MakeLocalCollectives();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json res;
    try {
      res = Run(json::parse(line), *coll);
    } catch (const dtsim::Error& e) {
      res = {{"error", e.what()}};
    }
    std::cout << res.dump() << "\n";
  }
  return 0;
}
