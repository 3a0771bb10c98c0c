// Option parsing for the commands that take files as positional arguments (export, replay,
// trace-diff). A header of its own, without LibTorch, for those light translation units.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "commands.h"

namespace dtsim::cli {

// Parses `args` against `desc` plus positional file arguments, which go to `files` in order; each
// command checks how many it got and says so in its own words (InputError("file", ...)).
inline boost::program_options::variables_map ParseOptionsWithFiles(
    const Args& args, const boost::program_options::options_description& desc,
    std::vector<std::string>* files) {
  namespace po = boost::program_options;
  po::options_description hidden;
  hidden.add_options()("file", po::value(files));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("file", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  return vm;
}

}  // namespace dtsim::cli
