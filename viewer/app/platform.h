// The viewer's platform layer: a GLFW window with an OpenGL 3 context, Dear ImGui's GLFW and
// OpenGL3 backends, and reading a rendered frame back for screenshots. Headless runs (screenshots,
// benchmarks) keep the window hidden and render into an offscreen framebuffer of exactly the
// requested size, so the picture does not depend on the screen (Xvfb's default screen is
// 1280x1024).
//
// Example: auto w = Window::Open({1600, 1000, /*headless=*/true});  w->BeginFrame(); ...panels...;
// w->EndFrame();
//          Image shot = w->ReadPixels();
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "viewer/model/render_png.h"

struct GLFWwindow;

namespace dtsim::viewer {

// No window or OpenGL context could be made (no X display, no GL driver). The viewer exits with
// code 4.
class DisplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WindowOptions {
  int width = 1600;  // pixels
  int height = 1000;
  bool headless = false;  // hidden window, offscreen framebuffer of width x height
  std::string title = "dtsim-viewer";
};

// What the mouse and keyboard do in one headless frame (tests, docs, benchmarks drive the viewer
// with these; see model/input_script.h).
struct InputFrame {
  float mouse_x = -1, mouse_y = -1;  // negative: no mouse
  bool mouse_down = false;           // the left button is held
  float wheel = 0;                   // notches, positive away from the user (zoom in)
  std::vector<int> keys;             // GLFW key codes pressed in this frame
  bool ctrl = false, shift = false;
  std::string text;  // characters typed in this frame (UTF-8)
};

class Window {
 public:
  // Opens the window and the ImGui context (dark style). Throws DisplayError naming what failed.
  static std::unique_ptr<Window> Open(const WindowOptions& options);
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  bool ShouldClose() const;
  // Interactive: sleeps until an input event (mouse, keyboard, resize, expose, focus) or
  // `timeout_s`; returns whether an event came. The window redraws only then (idle costs nothing).
  bool WaitForEvents(double timeout_s);
  // Polls events and starts an ImGui frame. Headless: `input` is the mouse and keyboard of this
  // frame (ignored in a real window, which has its own).
  void BeginFrame(const InputFrame& input = InputFrame{});
  // Renders the ImGui frame; shows it unless headless.
  void EndFrame();
  // Waits for the GPU to finish the frame (benchmarks).
  void Finish() const;
  // The pixels of the last frame rendered (top row first).
  Image ReadPixels() const;
  // The size ImGui lays out in (pixels).
  float width() const;
  float height() const;
  // Seconds since the window opened.
  double Now() const;

 private:
  Window() = default;
  WindowOptions options_;
  GLFWwindow* window_ = nullptr;
  unsigned int fbo_ = 0, color_ = 0;  // headless offscreen target
  bool imgui_ = false;                // the ImGui context and backends are up
};

}  // namespace dtsim::viewer
