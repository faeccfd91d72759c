#!/usr/bin/env bash
# Builds Squeeze (release) into ./build, installing missing Debian packages first.
# Extra arguments go to 'meson setup' on the first configure (e.g. -Dmpi=enabled).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ ! -f build/build.ninja ]; then
  meson setup build "$@"
fi
ninja -C build
