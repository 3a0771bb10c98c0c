// Headless input scripts (see input_script.h).
#include "input_script.h"

#include <GLFW/glfw3.h>

#include <cctype>
#include <cmath>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim::viewer {
namespace {

constexpr size_t kMaxEvents = 10000;  // a script is a test, not a recording

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

int KeyCode(const std::string& name) {
  static const std::pair<const char*, int> kKeys[] = {
      {"left", GLFW_KEY_LEFT},
      {"right", GLFW_KEY_RIGHT},
      {"up", GLFW_KEY_UP},
      {"down", GLFW_KEY_DOWN},
      {"home", GLFW_KEY_HOME},
      {"end", GLFW_KEY_END},
      {"space", GLFW_KEY_SPACE},
      {"escape", GLFW_KEY_ESCAPE},
      {"esc", GLFW_KEY_ESCAPE},
      {"tab", GLFW_KEY_TAB},
      {"enter", GLFW_KEY_ENTER},
      {"backspace", GLFW_KEY_BACKSPACE},
      {"f3", GLFW_KEY_F3},
      {"minus", GLFW_KEY_MINUS},
      {"equal", GLFW_KEY_EQUAL},
      {"pageup", GLFW_KEY_PAGE_UP},
      {"pagedown", GLFW_KEY_PAGE_DOWN},
  };
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [n, code] : kKeys) {
    if (lower == n) return code;
  }
  if (lower.size() == 1 && lower[0] >= 'a' && lower[0] <= 'z') return GLFW_KEY_A + (lower[0] - 'a');
  if (lower.size() == 1 && lower[0] >= '0' && lower[0] <= '9') return GLFW_KEY_0 + (lower[0] - '0');
  return -1;
}

}  // namespace

std::vector<InputFrame> ParseInputScript(const std::string& script, int width, int height) {
  std::vector<InputFrame> frames;
  float mx = -1, my = -1;  // where the mouse is
  size_t index = 0;
  size_t start = 0;
  while (start <= script.size()) {
    const size_t end = std::min(script.find(';', start), script.size());
    const std::string event = Trim(script.substr(start, end - start));
    start = end + 1;
    if (event.empty()) continue;
    ++index;
    auto bad = [&](const std::string& why) {
      return InputError("input", StrCat("event ", index, " '", ExcerptText(event), "': ", why));
    };
    if (index > kMaxEvents) throw bad(StrCat("more than ", kMaxEvents, " events"));
    auto point = [&](const std::string& text) {
      const size_t comma = text.find(',');
      char* e1 = nullptr;
      char* e2 = nullptr;
      const std::string xs = text.substr(0, comma),
                        ys = comma == std::string::npos ? std::string() : text.substr(comma + 1);
      const double x = std::strtod(xs.c_str(), &e1), y = std::strtod(ys.c_str(), &e2);
      if (comma == std::string::npos || xs.empty() || ys.empty() || *e1 != '\0' || *e2 != '\0' ||
          !std::isfinite(x) || !std::isfinite(y)) {
        throw bad(StrCat("'", ExcerptText(text), "' is not a point X,Y"));
      }
      if (x < 0 || y < 0 || x >= width || y >= height) {
        throw bad(StrCat("the point ", ExcerptText(text), " is outside the ", width, "x", height,
                         " picture"));
      }
      return std::pair<float, float>{static_cast<float>(x), static_cast<float>(y)};
    };
    auto at = [&](float x, float y) {
      InputFrame f;
      f.mouse_x = x;
      f.mouse_y = y;
      return f;
    };
    const std::vector<std::string> w = Words(event);
    const std::string& kind = w[0];
    if (kind == "move" || kind == "click") {
      if (w.size() != 2) throw bad(StrCat("'", kind, "' takes one point X,Y"));
      std::tie(mx, my) = point(w[1]);
      InputFrame f = at(mx, my);
      frames.push_back(f);
      if (kind == "click") {
        f.mouse_down = true;
        frames.push_back(f);
        f.mouse_down = false;
        frames.push_back(f);
      }
    } else if (kind == "wheel") {
      if (w.size() != 3) throw bad("'wheel' takes a point X,Y and a number of notches");
      std::tie(mx, my) = point(w[1]);
      char* e = nullptr;
      const double n = std::strtod(w[2].c_str(), &e);
      if (*e != '\0' || !std::isfinite(n) || n == 0 || std::abs(n) > 100)
        throw bad(
            StrCat("'", ExcerptText(w[2]), "' must be a number of notches, -100..100, not 0"));
      InputFrame f = at(mx, my);
      frames.push_back(f);
      f.wheel = static_cast<float>(n);
      frames.push_back(f);
      f.wheel = 0;
      frames.push_back(f);
    } else if (kind == "drag") {
      if (w.size() != 3) throw bad("'drag' takes two points X0,Y0 X1,Y1");
      const auto [x0, y0] = point(w[1]);
      const auto [x1, y1] = point(w[2]);
      InputFrame f = at(x0, y0);
      frames.push_back(f);
      f.mouse_down = true;
      frames.push_back(f);
      constexpr int kSteps = 6;
      for (int i = 1; i <= kSteps; ++i) {
        f.mouse_x = std::round(x0 + (x1 - x0) * static_cast<float>(i) / kSteps);
        f.mouse_y = std::round(y0 + (y1 - y0) * static_cast<float>(i) / kSteps);
        frames.push_back(f);
      }
      f.mouse_down = false;
      frames.push_back(f);
      mx = x1;
      my = y1;
    } else if (kind == "key") {
      if (w.size() != 2) throw bad("'key' takes one key, e.g. Right, Enter, ctrl+g");
      InputFrame f = at(mx, my);
      std::string name = w[1];
      for (;;) {
        const size_t plus = name.find('+');
        if (plus == std::string::npos || plus + 1 == name.size()) break;
        const std::string mod = name.substr(0, plus);
        if (mod == "ctrl") {
          f.ctrl = true;
        } else if (mod == "shift") {
          f.shift = true;
        } else {
          throw bad(StrCat("unknown modifier '", ExcerptText(mod), "' (ctrl, shift)"));
        }
        name = name.substr(plus + 1);
      }
      const int code = KeyCode(name);
      if (code < 0) {
        throw bad(StrCat("unknown key '", ExcerptText(name),
                         "' (Left Right Up Down Home End PageUp PageDown Space Escape Tab "
                         "Enter Backspace F3 minus equal a..z 0..9)"));
      }
      f.keys = {code};
      frames.push_back(f);
      f.keys.clear();
      frames.push_back(f);
    } else if (kind == "type") {
      const size_t at_text = event.find("type") + 4;
      const std::string text = Trim(event.substr(at_text));
      if (text.empty()) throw bad("'type' needs the text to type");
      InputFrame f = at(mx, my);
      f.text = text;
      frames.push_back(f);
      f.text.clear();
      frames.push_back(f);
    } else {
      throw bad(
          StrCat("unknown event '", ExcerptText(kind), "' (move, click, wheel, drag, key, type)"));
    }
  }
  return frames;
}

}  // namespace dtsim::viewer
