// dtsim._files_c: the output-path policy of dtsim's C++ writers (include/dtsim/trace/files.h) for
// the Python writers (dtsim record, import-fr, dtsim.record, dtsim run's --trace and --report-json;
// python/dtsim/_files.py). A module of its own, without LibTorch (it links only the trace library),
// so that `dtsim record` checks its outputs and starts the job it records without loading torch;
// and the recording reader, so that a Python writer checks that what it writes reads back.
// Errors as dtsim._C's (errors.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "errors.h"

namespace py = pybind11;

PYBIND11_MODULE(_files_c, m) {
  using namespace dtsim;
  m.doc() = "dtsim's output-path policy (use dtsim._files, not this module)";
  py::register_exception_translator(&TranslateError);
  // check_outputs((path, field) outputs, (path, field) inputs) refuses an output that is an input
  // or another output however spelled, a device, a directory or a folder that is not there
  // (ValueError naming the field); write_output(path, chunks, field) writes the buffers in order,
  // atomically for a regular or new file, through a symlink, as a stream to /dev/null, standard
  // output or a FIFO with a reader.
  m.def("check_outputs", [](const std::vector<std::pair<std::string, std::string>>& outputs,
                            const std::vector<std::pair<std::string, std::string>>& inputs) {
    RunFiles files;
    for (const auto& [path, field] : inputs) files.Input(path, field);
    for (const auto& [path, field] : outputs) files.Output(path, field);
  });
  m.def("write_output",
        [](const std::string& path, const py::list& chunks, const std::string& field) {
          // Contiguous buffers (bytes, numpy arrays), held until written; no joined copy.
          std::vector<Py_buffer> buffers(chunks.size());
          size_t taken = 0;
          auto release = [&] {
            for (size_t i = 0; i < taken; ++i) PyBuffer_Release(&buffers[i]);
          };
          std::vector<std::string_view> views;
          views.reserve(chunks.size());
          for (const py::handle chunk : chunks) {
            if (PyObject_GetBuffer(chunk.ptr(), &buffers[taken], PyBUF_C_CONTIGUOUS) != 0) {
              PyErr_Clear();
              release();
              throw InputError(field, StrCat("chunk ", taken, " (", Py_TYPE(chunk.ptr())->tp_name,
                                             ") is not a contiguous buffer"));
            }
            views.emplace_back(static_cast<const char*>(buffers[taken].buf),
                               static_cast<size_t>(buffers[taken].len));
            ++taken;
          }
          try {
            py::gil_scoped_release unlocked;
            WriteOutputFile(path, views, field);
          } catch (...) {
            release();
            throw;
          }
          release();
        });
  // check_recording(text) reads `text` as dtsim's readers read a recording file (RecordingFromText:
  // trace-diff, replay, the viewer), without its data sidecar; ValueError("recording: ...") names
  // the first problem.
  m.def("check_recording", [](const py::bytes& text) {
    std::string copy = text;
    py::gil_scoped_release unlocked;
    RecordingFromText(TraceTextOf("<the recording to write>", std::move(copy)));
  });
}
