// Choosing a backend by name (see include/dtsim/backends/backends.h).
#include "dtsim/backends/backends.h"

#include <cstdlib>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/config.h"
#include "dtsim/layout/error.h"
#if DTSIM_WITH_MPI
#include "dtsim/backends/mpi_collectives.h"
#endif
#if DTSIM_WITH_NCCL
#include "dtsim/backends/nccl_collectives.h"
#endif

namespace dtsim {

std::vector<std::string> BuiltBackends() {
  std::vector<std::string> out = {"local"};
  if (DTSIM_WITH_MPI) out.push_back("mpi");
  if (DTSIM_WITH_NCCL) out.push_back("nccl");
  return out;
}

std::shared_ptr<Collectives> MakeCollectives(const BackendOptions& options) {
  if (options.name == "local") return MakeLocalCollectives();
#if DTSIM_WITH_MPI
  if (options.name == "mpi") return MakeMpiCollectives(options.real);
#endif
#if DTSIM_WITH_NCCL
  if (options.name == "nccl") return MakeNcclCollectives(options.real);
#endif
  std::string built;
  for (const std::string& b : BuiltBackends()) built += (built.empty() ? "" : ", ") + b;
  if (options.name == "mpi" || options.name == "nccl") {
    throw InputError(
        "backend", StrCat("'", options.name, "' is not built into this dtsim (built: ", built,
                          "); configure with -DDTSIM_WITH_", options.name == "mpi" ? "MPI" : "NCCL",
                          "=ON where its library is installed"));
  }
  throw InputError("backend",
                   StrCat("unknown backend '", options.name, "' (expected one of: ", built, ")"));
}

std::string BackendFromEnvironment() {
  const bool launched =
      std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  return launched && DTSIM_WITH_MPI ? "mpi" : "local";
}

}  // namespace dtsim
