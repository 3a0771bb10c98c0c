// dtsim run, dtsim record and dtsim import-fr: hand the command to Python (python -m dtsim run,
// python/dtsim/run/; python -m dtsim record, python/dtsim/record_command.py; python -m dtsim
// import-fr, python/dtsim/fr_import.py), in place of this
// process, so that signals, output and the exit status are the launcher's own.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "dtsim/layout/error.h"

#ifndef DTSIM_DEFAULT_PYTHON
#define DTSIM_DEFAULT_PYTHON "python3"
#endif
#ifndef DTSIM_PYTHON_DIR
#define DTSIM_PYTHON_DIR ""
#endif

namespace dtsim::cli {

namespace {

[[noreturn]] void HandToPython(const char* command, const Args& args) {
  // The interpreter: $DTSIM_PYTHON (a user's own venv), else the one this build was configured
  // with (the project venv, which holds torch and the dtsim package).
  const char* from_env = std::getenv("DTSIM_PYTHON");
  std::string python = from_env != nullptr && *from_env != '\0' ? from_env : DTSIM_DEFAULT_PYTHON;
  // The package this binary was built with comes first on the module path.
  std::string package_dir = DTSIM_PYTHON_DIR;
  if (!package_dir.empty()) {
    const char* old_path = std::getenv("PYTHONPATH");
    std::string path = package_dir;
    if (old_path != nullptr && *old_path != '\0') path += std::string(":") + old_path;
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> words = {python, "-m", "dtsim", command};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  execvp(python.c_str(), argv.data());
  throw InputError("python", "cannot run '" + python +
                                 "' (set DTSIM_PYTHON to a Python with torch and dtsim): " +
                                 std::strerror(errno));
}

}  // namespace

int RunRun(const Args& args) { HandToPython("run", args); }

int RunRecord(const Args& args) { HandToPython("record", args); }

int RunImportFr(const Args& args) { HandToPython("import-fr", args); }

}  // namespace dtsim::cli
