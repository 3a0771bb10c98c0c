// dtsim trace-diff: where two traces of a redistribution part (simulated vs real ranks, or two
// builds).
//
//   dtsim trace-diff A.json B.json [--limit 20]
//   dtsim trace-diff RECORDING.json [--limit 20]
// Both traces of a redistribution (dtsim-trace), of an op (dtsim-op-trace), of a model
// (dtsim-model-trace), or two recordings (dtsim-recording: dtsim.record, dtsim run --trace).
// Prints "traces agree" (exit 0) or the differences in run order, the first being where the runs
// part (exit 1). Unreadable or invalid traces are input errors (exit 2). The comparison is the
// files' format driver's (include/dtsim/trace/formats.h). One recording alone is checked for
// consistency inside its run: every replica of every redistribution and DTensor op equal (exit 0),
// an odd rank out (exit 1), nothing checkable (exit 3).
#include <boost/program_options.hpp>
#include <iostream>
#include <utility>

#include "commands.h"
#include "dtsim/core/op_schema.h"
#include "dtsim/layout/error.h"
#include "dtsim/trace/formats.h"
#include "file_arguments.h"

namespace po = boost::program_options;

namespace dtsim::cli {

int RunTraceDiff(const Args& args) {
  std::vector<std::string> files;
  int64_t limit = 20;
  po::options_description desc("dtsim trace-diff options");
  desc.add_options()("help,h", "show this help")("limit", po::value(&limit)->default_value(limit),
                                                 "print at most this many differences");
  const po::variables_map vm = ParseOptionsWithFiles(args, desc, &files);
  if (vm.count("help")) {
    std::cout << "usage: dtsim trace-diff A.json B.json [--limit 20]\n"
                 "       dtsim trace-diff RECORDING.json [--limit 20]   (its replicas)\n"
              << desc;
    return 0;
  }
  if (files.size() != 2 && files.size() != 1)
    throw InputError("file", StrCat("give two trace files (or one recording), got ", files.size()));
  if (limit < 1 || limit > 1000000) {
    throw InputError("limit", StrCat(limit, " is out of range: print 1 to 1000000 differences"));
  }
  TraceDiffOptions options;
  options.limit = static_cast<size_t>(limit);
  options.op_argument_check = TensorArgumentProblem;
  if (files.size() == 1) {
    // One file: the check its format makes of itself (a recording: its replicas).
    TraceText text = ReadTraceText(files[0]);
    const TraceFormatDriver& driver = TraceFormatDriverFor(text, text);
    if (driver.check == nullptr) {
      throw InputError("file",
                       StrCat("give two trace files, got 1: '", files[0], "' is ", driver.what,
                              ", which is compared with another; one file "
                              "alone is checked only when it is a recording"));
    }
    return driver.check(text, options, std::cout);
  }
  // Both files are read (in parallel) and checked as JSON; the driver of their format validates
  // and compares them (include/dtsim/trace/formats.h).
  std::pair<TraceText, TraceText> texts = ReadTraceTexts(files[0], files[1]);
  return TraceFormatDriverFor(texts.first, texts.second)
      .diff(texts.first, texts.second, options, std::cout);
}

}  // namespace dtsim::cli
