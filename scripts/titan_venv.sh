#!/usr/bin/env bash
# The torchtitan lane's venv (issue 59; docs/run.md, "torchtitan"): torch 2.15.0 and torchtitan 0.3.0, which needs
# torch >= 2.14. torch 2.15.0 exists only as a CUDA wheel (a few GB with its nvidia packages; it installs and imports
# on a CPU machine), on PyPI alone, so the install reads PyPI (PIP_CONFIG_FILE=/dev/null, past this machine's cap).
# The venv lives outside the checkout, in $DTSIM_TITAN_VENV (default ~/.cache/dtsim/titan-venv-2.15.0), so that every
# clone on the machine (CI's fresh one too) reuses it; it is made again only when it lacks those releases.
# Prints the venv's python on stdout; progress on stderr.
set -euo pipefail
TORCH=2.15.0
TITAN=0.3.0
VENV="${DTSIM_TITAN_VENV:-$HOME/.cache/dtsim/titan-venv-$TORCH}"
PY="$VENV/bin/python"
say() { echo "[titan venv] $*" >&2; }
has() {
  "$PY" - "$TORCH" "$TITAN" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(not (m.version("torch").split("+")[0] == sys.argv[1] and m.version("torchtitan") == sys.argv[2]))
PY
}
if ! has; then
  say "creating $VENV: torch==$TORCH torchtitan==$TITAN from PyPI (a few GB the first time; minutes)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  PIP_CONFIG_FILE=/dev/null PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PY" -m pip install --progress-bar off -q "torch==$TORCH" "torchtitan==$TITAN" numpy >&2
  has || { say "torch==$TORCH and torchtitan==$TITAN did not install in $VENV"; exit 1; }
fi
say "$("$PY" -c 'import torch, torchtitan; print("torch", torch.__version__, "torchtitan", torchtitan.__version__)') in $VENV"
echo "$PY"
