// The viewer's state (see app_state.h).
#include "app_state.h"

#include <algorithm>

#include "dtsim/layout/error.h"

namespace dtsim::viewer {

const TraceModel& App::shown() const {
  DTSIM_CHECK(first.has_value(), "no trace loaded");
  return view.show_second && second ? *second : *first;
}

const TraceDiff* App::shown_diff() const {
  if (!second) return nullptr;
  return view.show_second ? &*diff_reversed : &*diff;
}

const TraceModel* App::other() const {
  if (!second) return nullptr;
  return view.show_second ? &*first : &*second;
}

void LoadTraces(App& app, const std::vector<std::string>& paths) {
  app.paths = paths;
  app.first.reset();
  app.second.reset();
  app.diff.reset();
  app.diff_reversed.reset();
  app.error.clear();
  app.error_field.clear();
  app.error_message.clear();
  app.view = ViewState{};
  try {
    if (paths.empty() || paths.size() > 2) {
      throw InputError("traces",
                       StrCat("give one trace, or two to compare (got ", paths.size(), ")"));
    }
    TraceModel a = TraceModel::Load(paths[0]);
    if (paths.size() == 2) {
      TraceModel b = TraceModel::Load(paths[1]);
      TraceDiff d = DiffModels(a, b);
      app.diff_reversed = DiffModels(b, a);
      app.view.frame = d.first_frame.value_or(0);
      app.diff = std::move(d);
      app.second = std::move(b);
    }
    app.first = std::move(a);
  } catch (const InputError& e) {
    app.first.reset();
    app.second.reset();
    app.diff.reset();
    app.diff_reversed.reset();
    app.error = e.what();
    app.error_field = e.field();
    const std::string what = e.what();
    app.error_message = what.substr(std::min(what.size(), e.field().size() + 2));
  }
}

}  // namespace dtsim::viewer
