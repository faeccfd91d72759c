#!/usr/bin/env bash
# Sets up a Meson build folder with the given options, or brings one set up before (by an older
# script, or by hand) to them: only the options that differ are configured, so an unchanged
# folder is not regenerated. Used by scripts/standin.sh and scripts/sanitize.sh.
# Usage: scripts/configure-build.sh DIR -Dname=value...
set -euo pipefail
dir=$1
shift
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@" >/dev/null
  exit 0
fi
changed=$(meson introspect "$dir" --buildoptions | /usr/bin/python3 -c '
import json, sys
have = {o["name"]: o["value"] for o in json.load(sys.stdin)}
for arg in sys.argv[1:]:
    name, value = arg[2:].split("=", 1)
    cur = have.get(name)
    if isinstance(cur, list):  # cpp_args
        cur = " ".join(cur)
    if str(cur).lower() != value:
        print(arg)' "$@")
if [ -n "$changed" ]; then
  echo "$(basename "$0"): $dir: setting ${changed//$'\n'/ }"
  meson configure "$dir" "$@" >/dev/null
fi
