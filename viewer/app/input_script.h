// Headless input: a script of mouse and keyboard events that tests, docs and benchmarks play into
// the viewer (--input), one or a few frames per event, so hit-testing, zoom, pan, go-to-rank and
// the find boxes are exercised by the same code a person drives.
//
//   move X,Y            the mouse to pixel (X, Y); it stays there for the next events
//   click X,Y           press and release the left button at (X, Y)
//   wheel X,Y N         turn the wheel N notches at (X, Y) (N > 0 zooms in, N < 0 out)
//   drag X0,Y0 X1,Y1    press at (X0, Y0), move to (X1, Y1) over a few frames, release
//   key NAME            press and release a key: Left Right Up Down Home End PageUp PageDown Space
//                       Escape Tab Enter Backspace F3 minus equal a..z 0..9, with modifiers as
//                       ctrl+g, shift+Enter
//   type TEXT           type TEXT (up to the end of the event)
//
// Events are separated by ';'. Example: "wheel 300,400 3; drag 300,400 250,380; key r".
#pragma once

#include <string>
#include <vector>

#include "platform.h"

namespace dtsim::viewer {

// The frames of `script` in a picture of `width` x `height` pixels. InputError("input") naming the
// event and what is wrong (an unknown event or key, a point outside the picture, a bad number).
std::vector<InputFrame> ParseInputScript(const std::string& script, int width, int height);

}  // namespace dtsim::viewer
