#!/usr/bin/env bash
# Formats every C++ file of the project with clang-format (the style is .clang-format at the root), or with --check
# lists the files that differ from it and exits 1 (ctest's `format` test runs that; scripts/setup.sh installs
# clang-format-14 from Debian).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLANG_FORMAT="${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}"
if [ -z "$CLANG_FORMAT" ]; then
  echo "format: clang-format-14 is not installed (apt-get install clang-format-14, or run scripts/setup.sh)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cpp' '*.hpp')
case "${1:-}" in
  --check)
    bad=()
    for f in "${files[@]}"; do
      "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    if [ ${#bad[@]} -gt 0 ]; then
      echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (run scripts/format.sh):" >&2
      printf '  %s\n' "${bad[@]}" >&2
      exit 1
    fi
    echo "format: all ${#files[@]} C++ files follow .clang-format"
    ;;
  "")
    "$CLANG_FORMAT" -i "${files[@]}"
    echo "format: formatted ${#files[@]} C++ files"
    ;;
  *)
    echo "usage: scripts/format.sh [--check]" >&2
    exit 2
    ;;
esac
