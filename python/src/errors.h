// How dtsim's errors cross into Python, for both extensions (module.cc: dtsim._C; files_module.cc:
// dtsim._files_c): InputError becomes ValueError (its message names the field), any other dtsim
// Error RuntimeError. Register with py::register_exception_translator(&dtsim::TranslateError).
#pragma once

#include <Python.h>

#include <exception>

#include "dtsim/layout/error.h"

namespace dtsim {

inline void TranslateError(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const InputError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace dtsim
