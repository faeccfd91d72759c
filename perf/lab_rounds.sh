# Sourced by perf/adaptive_real.sh and perf/dgc_real.sh: what their lab rounds share.
# shellcheck shell=bash

# require_python_package SCRIPT BUILD: exits 2, saying so, when BUILD has no Python package.
require_python_package() {
  [[ -f $2/python/squeeze/__init__.py ]] ||
    { echo "$1: $2/python has no squeeze package; build first (scripts/build.sh)" >&2; exit 2; }
}

# spec_args ROUND SPEC...: sets the array spec_args to "-c SPEC" for each spec, in the given
# order in odd rounds and backwards in even ones, so that a drift in this shared machine's speed
# does not favour the specs run first.
spec_args() {
  local round=$1 spec
  shift
  spec_args=()
  for spec in "$@"; do
    if ((round % 2)); then spec_args+=(-c "$spec"); else spec_args=(-c "$spec" "${spec_args[@]}"); fi
  done
}
