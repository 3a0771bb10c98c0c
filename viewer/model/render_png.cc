// Software rasteriser and PNG encoding (see render_png.h).
#include "render_png.h"

#include <stb_easy_font.h>
#include <stb_image.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cmath>

#include "dtsim/layout/error.h"

namespace dtsim::viewer {
namespace {

class Canvas {
 public:
  explicit Canvas(Image& image) : img_(image) {}

  void Blend(int x, int y, Rgba c) {
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height || c.a == 0) return;
    uint8_t* p = &img_.rgba[(static_cast<size_t>(y) * img_.width + x) * 4];
    if (c.a == 255) {
      p[0] = c.r, p[1] = c.g, p[2] = c.b, p[3] = 255;
      return;
    }
    const int a = c.a;
    p[0] = static_cast<uint8_t>((c.r * a + p[0] * (255 - a) + 127) / 255);
    p[1] = static_cast<uint8_t>((c.g * a + p[1] * (255 - a) + 127) / 255);
    p[2] = static_cast<uint8_t>((c.b * a + p[2] * (255 - a) + 127) / 255);
    p[3] = 255;
  }

  // Pixels whose centres lie in [x0, x1) x [y0, y1).
  void Fill(float x0, float y0, float x1, float y1, Rgba c) {
    const int ix0 = std::max(0, static_cast<int>(std::ceil(x0 - 0.5f)));
    const int iy0 = std::max(0, static_cast<int>(std::ceil(y0 - 0.5f)));
    const int ix1 = std::min(img_.width, static_cast<int>(std::ceil(x1 - 0.5f)));
    const int iy1 = std::min(img_.height, static_cast<int>(std::ceil(y1 - 0.5f)));
    for (int y = iy0; y < iy1; ++y) {
      for (int x = ix0; x < ix1; ++x) Blend(x, y, c);
    }
  }

  void Border(const Rect& r, float w, Rgba c) {
    w = std::min({w, r.width() / 2, r.height() / 2});
    if (w <= 0) return;
    Fill(r.x0, r.y0, r.x1, r.y0 + w, c);
    Fill(r.x0, r.y1 - w, r.x1, r.y1, c);
    Fill(r.x0, r.y0 + w, r.x0 + w, r.y1 - w, c);
    Fill(r.x1 - w, r.y0 + w, r.x1, r.y1 - w, c);
  }

  void Line(const DrawLine& l) {
    const float dx = l.x1 - l.x0, dy = l.y1 - l.y0;
    const float len = std::sqrt(dx * dx + dy * dy);
    const float h = std::max(0.5f, l.width / 2);
    if (dx == 0 || dy == 0) {
      Fill(std::min(l.x0, l.x1) - (dx == 0 ? h : 0), std::min(l.y0, l.y1) - (dy == 0 ? h : 0),
           std::max(l.x0, l.x1) + (dx == 0 ? h : 0), std::max(l.y0, l.y1) + (dy == 0 ? h : 0),
           l.color);
      return;
    }
    // Distance to the segment, one pass over its bounding box (no pixel painted twice, so alpha
    // stays right).
    const int x0 = static_cast<int>(std::floor(std::min(l.x0, l.x1) - h));
    const int x1 = static_cast<int>(std::ceil(std::max(l.x0, l.x1) + h));
    const int y0 = static_cast<int>(std::floor(std::min(l.y0, l.y1) - h));
    const int y1 = static_cast<int>(std::ceil(std::max(l.y0, l.y1) + h));
    for (int y = std::max(0, y0); y <= std::min(img_.height - 1, y1); ++y) {
      for (int x = std::max(0, x0); x <= std::min(img_.width - 1, x1); ++x) {
        const float px = x + 0.5f - l.x0, py = y + 0.5f - l.y0;
        const float t = std::clamp((px * dx + py * dy) / (len * len), 0.0f, 1.0f);
        const float ex = px - t * dx, ey = py - t * dy;
        if (ex * ex + ey * ey <= h * h) Blend(x, y, l.color);
      }
    }
  }

  void Text(const DrawText& t) {
    std::string text = t.text;
    for (char& c : text) {
      if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
    }
    std::vector<char> buffer(text.size() * 300 + 64);
    // stb_easy_font draws about 7 px tall glyphs from y; centre them in the reserved line.
    const int quads = stb_easy_font_print(t.x, t.y + std::max(0.0f, (t.h - 8) / 2), text.data(),
                                          nullptr, buffer.data(), static_cast<int>(buffer.size()));
    const float* v = reinterpret_cast<const float*>(buffer.data());
    for (int q = 0; q < quads; ++q) {
      const float* a = v + q * 16;  // 4 vertices of 4 floats (x, y, z, colour)
      Fill(a[0], a[1], a[8], a[9], t.color);
    }
  }

 private:
  Image& img_;
};

}  // namespace

Rgba Image::At(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height) return Rgba{};
  const uint8_t* p = &rgba[(static_cast<size_t>(y) * width + x) * 4];
  return Rgba{p[0], p[1], p[2], p[3]};
}

Image Rasterize(const DrawList& list, int width, int height, Rgba background) {
  Image img;
  img.width = std::max(1, width);
  img.height = std::max(1, height);
  img.rgba.resize(static_cast<size_t>(img.width) * img.height * 4);
  for (size_t i = 0; i < img.rgba.size(); i += 4) {
    img.rgba[i] = background.r, img.rgba[i + 1] = background.g, img.rgba[i + 2] = background.b,
    img.rgba[i + 3] = 255;
  }
  Canvas c(img);
  for (const DrawRect& r : list.rects) {
    if (r.fill.visible()) c.Fill(r.rect.x0, r.rect.y0, r.rect.x1, r.rect.y1, r.fill);
    if (r.border.visible()) c.Border(r.rect, r.border_width, r.border);
  }
  for (const DrawLine& l : list.lines) c.Line(l);
  for (const DrawText& t : list.texts) c.Text(t);
  return img;
}

std::string EncodePng(const Image& image) {
  std::string out;
  auto write = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                               static_cast<size_t>(size));
  };
  const int ok = stbi_write_png_to_func(write, &out, image.width, image.height, 4,
                                        image.rgba.data(), image.width * 4);
  DTSIM_CHECK(ok != 0, "PNG encoding of a ", image.width, "x", image.height, " image failed");
  return out;
}

Image DecodePng(const std::string& bytes) {
  Image img;
  int w = 0, h = 0, channels = 0;
  unsigned char* data = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                                              static_cast<int>(bytes.size()), &w, &h, &channels, 4);
  if (data == nullptr) return img;
  img.width = w;
  img.height = h;
  img.rgba.assign(data, data + static_cast<size_t>(w) * h * 4);
  stbi_image_free(data);
  return img;
}

}  // namespace dtsim::viewer
