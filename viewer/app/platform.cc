// GLFW + OpenGL 3 + ImGui backends (see platform.h).
#define GL_GLEXT_PROTOTYPES 1
#include "platform.h"

// GLFW brings GL/gl.h, which glext.h needs first.
// clang-format off
#include <GLFW/glfw3.h>
#include <GL/glext.h>
// clang-format on
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

namespace dtsim::viewer {
namespace {

std::string g_glfw_error;
bool g_event = false;  // an input event arrived since the last WaitForEvents

void OnGlfwError(int code, const char* text) {
  g_glfw_error = std::string(text) + " (GLFW error " + std::to_string(code) + ")";
}

// Installed before ImGui's backend, which chains to them: they only note that something happened.
void OnCursor(GLFWwindow*, double, double) { g_event = true; }
void OnButton(GLFWwindow*, int, int, int) { g_event = true; }
void OnScroll(GLFWwindow*, double, double) { g_event = true; }
void OnKey(GLFWwindow*, int, int, int, int) { g_event = true; }
void OnChar(GLFWwindow*, unsigned int) { g_event = true; }
void OnFocus(GLFWwindow*, int) { g_event = true; }
void OnEnter(GLFWwindow*, int) { g_event = true; }
void OnSize(GLFWwindow*, int, int) { g_event = true; }
void OnRefresh(GLFWwindow*) { g_event = true; }

}  // namespace

std::unique_ptr<Window> Window::Open(const WindowOptions& options) {
  glfwSetErrorCallback(OnGlfwError);
  if (!glfwInit()) {
    const char* display = std::getenv("DISPLAY");
    const std::string why = g_glfw_error.empty() ? std::string("glfwInit failed") : g_glfw_error;
    throw DisplayError(
        "cannot open a window: " + why +
        (display == nullptr || *display == '\0'
             ? "; DISPLAY is not set (for screenshots without a screen, run under xvfb-run -a)"
             : ""));
  }
  std::unique_ptr<Window> w(new Window());
  w->options_ = options;
  glfwWindowHint(GLFW_VISIBLE, options.headless ? GLFW_FALSE : GLFW_TRUE);
  // OpenGL 3.3 core where available, else any 3.0 context.
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  const char* glsl = "#version 330";
  w->window_ =
      glfwCreateWindow(options.width, options.height, options.title.c_str(), nullptr, nullptr);
  if (w->window_ == nullptr) {
    glfwDefaultWindowHints();
    glfwWindowHint(GLFW_VISIBLE, options.headless ? GLFW_FALSE : GLFW_TRUE);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
    glsl = "#version 130";
    w->window_ =
        glfwCreateWindow(options.width, options.height, options.title.c_str(), nullptr, nullptr);
  }
  if (w->window_ == nullptr) {
    glfwTerminate();
    throw DisplayError("cannot create an OpenGL 3 window: " + g_glfw_error);
  }
  glfwMakeContextCurrent(w->window_);
  glfwSwapInterval(options.headless ? 0 : 1);
  if (options.headless) {
    glGenFramebuffers(1, &w->fbo_);
    glGenRenderbuffers(1, &w->color_);
    glBindRenderbuffer(GL_RENDERBUFFER, w->color_);
    glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, options.width, options.height);
    glBindFramebuffer(GL_FRAMEBUFFER, w->fbo_);
    glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, w->color_);
    if (glCheckFramebufferStatus(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE) {
      throw DisplayError("cannot create an offscreen framebuffer of " +
                         std::to_string(options.width) + "x" + std::to_string(options.height));
    }
  }
  if (!options.headless) {
    glfwSetCursorPosCallback(w->window_, OnCursor);
    glfwSetMouseButtonCallback(w->window_, OnButton);
    glfwSetScrollCallback(w->window_, OnScroll);
    glfwSetKeyCallback(w->window_, OnKey);
    glfwSetCharCallback(w->window_, OnChar);
    glfwSetWindowFocusCallback(w->window_, OnFocus);
    glfwSetCursorEnterCallback(w->window_, OnEnter);
    glfwSetFramebufferSizeCallback(w->window_, OnSize);
    glfwSetWindowRefreshCallback(w->window_, OnRefresh);
  }
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini next to the user's traces
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0;
  style.ChildRounding = 0;
  // The full-window background comes from glClear: a textured, blended quad over every pixel costs
  // software renderers (Mesa's llvmpipe under Xvfb) a large share of each frame.
  style.Colors[ImGuiCol_WindowBg] = ImVec4(0, 0, 0, 0);
  ImGui_ImplGlfw_InitForOpenGL(w->window_, true);
  ImGui_ImplOpenGL3_Init(glsl);
  w->imgui_ = true;
  return w;
}

Window::~Window() {
  if (window_ == nullptr) return;
  if (imgui_) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  if (fbo_ != 0) {
    glDeleteFramebuffers(1, &fbo_);
    glDeleteRenderbuffers(1, &color_);
  }
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool Window::ShouldClose() const { return glfwWindowShouldClose(window_) != 0; }

double Window::Now() const { return glfwGetTime(); }

float Window::width() const { return ImGui::GetIO().DisplaySize.x; }
float Window::height() const { return ImGui::GetIO().DisplaySize.y; }

bool Window::WaitForEvents(double timeout_s) {
  g_event = false;
  glfwWaitEventsTimeout(std::max(0.0, timeout_s));
  return g_event;
}

void Window::BeginFrame(const InputFrame& input) {
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (options_.headless) {
    ImGuiIO& io = ImGui::GetIO();
    io.DisplaySize =
        ImVec2(static_cast<float>(options_.width), static_cast<float>(options_.height));
    io.DisplayFramebufferScale = ImVec2(1, 1);
    io.MousePos =
        input.mouse_x < 0 ? ImVec2(-FLT_MAX, -FLT_MAX) : ImVec2(input.mouse_x, input.mouse_y);
    for (bool& down : io.MouseDown) down = false;
    io.MouseDown[0] = input.mouse_down;
    io.MouseWheel = input.wheel;
    for (bool& down : io.KeysDown) down = false;
    for (int key : input.keys) {
      if (key >= 0 && key < static_cast<int>(IM_ARRAYSIZE(io.KeysDown))) io.KeysDown[key] = true;
    }
    io.KeyCtrl = input.ctrl;
    io.KeyShift = input.shift;
    io.KeyAlt = io.KeySuper = false;
    if (!input.text.empty()) io.AddInputCharactersUTF8(input.text.c_str());
  }
  ImGui::NewFrame();
}

void Window::EndFrame() {
  ImGui::Render();
  int w = options_.width, h = options_.height;
  if (!options_.headless) glfwGetFramebufferSize(window_, &w, &h);
  if (fbo_ != 0) glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glViewport(0, 0, w, h);
  glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (!options_.headless) glfwSwapBuffers(window_);
}

void Window::Finish() const { glFinish(); }

Image Window::ReadPixels() const {
  Image img;
  img.width = options_.width;
  img.height = options_.height;
  if (!options_.headless) glfwGetFramebufferSize(window_, &img.width, &img.height);
  std::vector<uint8_t> raw(static_cast<size_t>(img.width) * img.height * 4);
  if (fbo_ != 0) glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, img.width, img.height, GL_RGBA, GL_UNSIGNED_BYTE, raw.data());
  // OpenGL's rows run bottom to top.
  img.rgba.resize(raw.size());
  const size_t row = static_cast<size_t>(img.width) * 4;
  for (int y = 0; y < img.height; ++y) {
    std::copy(raw.begin() + (img.height - 1 - y) * row, raw.begin() + (img.height - y) * row,
              img.rgba.begin() + y * row);
  }
  for (size_t i = 3; i < img.rgba.size(); i += 4) img.rgba[i] = 255;
  return img;
}

}  // namespace dtsim::viewer
