#!/usr/bin/env bash
# scripts/compat.sh TORCH_VERSION: dtsim against another torch release, installed as a user installs it into their
# own venv (issue 35; docs/python.md, "Install into your own venv" and "Supported torch releases").
#   1. A venv of its own, .compat/torch-<V>/, with torch==<V> (a CUDA wheel where that is the only one: it installs
#      and imports on a CPU machine) and pytest. Kept for the next run while it holds that torch.
#   2. The build requirements that pyproject.toml lists, torch excluded, then `pip install --no-build-isolation` of
#      this checkout: dtsim._C, `dtsim` and `dtsim-viewer` built against that torch (build tree
#      build-compat/torch-<V>/, through ccache).
#   3. The install itself: `import dtsim` from outside the checkout finds the venv's copy, built with that torch, and
#      the venv's `dtsim` runs.
#   4. The Python tests and the oracle subset, with that venv's torch as upstream (so changes of semantics between
#      releases fail here): tests/python/, the layout, plan, redistribution and op oracles, and tests/run/ (users'
#      scripts under that torch's real torchrun and under `dtsim run`).
# Prints a line per step and per suite, then "compat torch <V>: passed" (exit 0) or "... FAILED" (exit 1); the
# suites' output is in build-compat/torch-<V>/compat.log. CI runs the project's torch only (scripts/test.sh).
set -euo pipefail
if [ $# -ne 1 ] || ! [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: scripts/compat.sh TORCH_VERSION   (a release such as 2.15.0; got: ${*:-nothing})" >&2
  exit 2
fi
V="$1"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"  # Debian packages (the C++ build's), ccache's settings
VENV="$DTSIM_ROOT/.compat/torch-$V"
PY="$VENV/bin/python"
BUILD="$DTSIM_ROOT/build-compat/torch-$V"
LOG="$BUILD/compat.log"
mkdir -p "$BUILD"
: >"$LOG"
say() { echo "[compat $V] $*" >&2; }
quiet_pip() { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }
# This machine's pip configuration caps torch at the releases it keeps; once the venv holds its torch, the cap must
# not move it (the dtsim install resolves its dependency on torch against the venv's).
export PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1

# 1. The venv.
if ! "$PY" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$V')" 2>/dev/null; then
  say "creating $VENV with torch==$V (where only a CUDA wheel exists, a few GB with its nvidia packages)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  if ! "$PY" -m pip install -q "torch==$V" numpy pytest 2>&1 | quiet_pip ||
     ! "$PY" -c "import torch" 2>/dev/null; then
    say "torch==$V is not in this machine's package indexes; trying PyPI's (PIP_CONFIG_FILE=/dev/null)"
    PIP_CONFIG_FILE=/dev/null "$PY" -m pip install -q "torch==$V" numpy pytest 2>&1 | quiet_pip
  fi
  "$PY" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$V')" ||
    { say "torch==$V did not install"; exit 1; }
fi
say "torch $("$PY" -c 'import torch; print(torch.__version__)') in $VENV"

# 2. Build requirements (torch excluded: the venv's is the one to build against), then dtsim.
mapfile -t requires < <("$PY" - "$DTSIM_ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    for req in tomllib.load(f)["build-system"]["requires"]:
        if re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower() != "torch":
            print(req)
PY
)
say "build requirements: ${requires[*]}"
"$PY" -m pip install -q "${requires[@]}" 2>&1 | quiet_pip
say "pip install --no-build-isolation $DTSIM_ROOT (build tree $BUILD; progress as [built/total])"
"$PY" -m pip install -v --no-build-isolation -C build-dir="$BUILD" \
  -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache "$DTSIM_ROOT" >"$BUILD/pip.log" 2>&1 < /dev/null &
pip_pid=$!
trap 'kill "$pip_pid" 2>/dev/null || true' EXIT  # an interrupted run leaves no build behind
while kill -0 "$pip_pid" 2>/dev/null; do
  sleep 20
  step="$(grep -oE "\[[0-9]+/[0-9]+\]" "$BUILD/pip.log" | tail -1 || true)"
  [ -n "$step" ] && say "building $step"
done
if ! wait "$pip_pid"; then
  grep -v "is ignored: it is neither" "$BUILD/pip.log" | grep -E "error|Error" | head -20 >&2 || true
  say "pip install failed: $BUILD/pip.log"
  exit 1
fi
built="$(grep -oE "\[[0-9]+/[0-9]+\]" "$BUILD/pip.log" | tail -1 || true)"
trap - EXIT
say "built and installed (${built:-nothing to rebuild}; log $BUILD/pip.log)"

# 3. The install, from outside the checkout.
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
(cd / && env -u PYTHONPATH "$PY" - "$site" "$V" <<'PY'
import os, sys
import dtsim
from dtsim import _build_info
want = os.path.join(sys.argv[1], "dtsim", "__init__.py")
assert os.path.realpath(dtsim.__file__) == os.path.realpath(want), f"import dtsim found {dtsim.__file__}, not {want}"
assert _build_info.TORCH_VERSION.split("+")[0] == sys.argv[2], _build_info.TORCH_VERSION
PY
) || { say "import dtsim does not find the venv's install"; exit 1; }
"$VENV/bin/dtsim" plan --mesh 2,2 --shape 8,8 --from "S(0),S(1)" --to "R,R" >/dev/null ||
  { say "the venv's dtsim does not run"; exit 1; }
say "installed: $site/dtsim, $VENV/bin/dtsim$([ -x "$VENV/bin/dtsim-viewer" ] && echo ", $VENV/bin/dtsim-viewer")"

# 4. The suites, with the venv's dtsim, package and torch.
export DTSIM_BIN="$VENV/bin/dtsim" DTSIM_EXPECT_PACKAGE="$site/dtsim" PYTHONDONTWRITEBYTECODE=1
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
[ -x "$VENV/bin/dtsim-viewer" ] && export DTSIM_VIEWER_BIN="$VENV/bin/dtsim-viewer"
export PATH="$VENV/bin:$PATH"  # torchrun of that torch
suites=(tests/python/test_api.py tests/python/test_api_vs_upstream.py tests/python/test_recorder.py
        tests/oracle/test_layout_oracle.py tests/oracle/test_plan_oracle.py tests/oracle/test_redistribute_oracle.py
        tests/oracle/test_op_oracle.py tests/run/test_run.py)
failed=()
for suite in "${suites[@]}"; do
  start=$SECONDS
  echo "==== $suite" >>"$LOG"
  if (cd "$DTSIM_ROOT" && env -u PYTHONPATH "$PY" -m pytest -q -p no:cacheprovider "$suite") >>"$LOG" 2>&1; then
    say "$suite: passed ($((SECONDS - start)) s)"
  else
    say "$suite: FAILED ($((SECONDS - start)) s; $LOG)"
    failed+=("$suite")
  fi
done
if [ ${#failed[@]} -eq 0 ]; then
  echo "compat torch $V: passed (${#suites[@]} suites)"
else
  echo "compat torch $V: FAILED: ${failed[*]}"
  exit 1
fi
