#!/usr/bin/env bash
# Builds a program outside the tree against Squeeze as a user would, with
# `cc prog.c $(pkg-config --cflags --libs squeeze)`, and runs it (one rank: id, init, all-reduce,
# destroy): once against the build tree (meson-uninstalled/squeeze-uninstalled.pc) and once
# against `meson install --destdir` into a scratch folder (squeeze.pc with its prefix moved
# there). README.md's "Building your program against Squeeze" gives the same commands.
# Usage: pkgconfig_test.sh BUILD-DIR MESON CC   (run by tests/install/meson.build)
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 BUILD-DIR MESON CC" >&2
  exit 2
fi
build=$1 meson=$2 cc=$3
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" pkgconfig_test

if ! command -v pkg-config >/dev/null 2>&1; then
  echo "FAIL: pkg-config is not installed (scripts/install-deps.sh installs it)"
  exit 1
fi

cat >"$tmp/prog.c" <<'EOF'
/* A one-rank all-reduce through the installed header and library. */
#include <squeeze/squeeze.h>
#include <stdio.h>

#define CHECK(call)                                                        \
  do {                                                                     \
    sqzResult_t r_ = (call);                                               \
    if (r_ != sqzSuccess) {                                                \
      fprintf(stderr, "%s: %s\n", #call, sqzGetErrorString(r_));           \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(void) {
  int version = 0;
  CHECK(sqzGetVersion(&version));
  sqzUniqueId id;
  CHECK(sqzGetUniqueId(&id));
  sqzComm_t comm;
  CHECK(sqzCommInitRank(&comm, 1, id, 0));
  float send[4] = {1, 2, 3, 4}, recv[4] = {0, 0, 0, 0};
  CHECK(sqzAllReduce(send, recv, 4, sqzFloat32, sqzSum, comm, NULL));
  CHECK(sqzCommDestroy(comm));
  for (int i = 0; i < 4; ++i) {
    if (recv[i] != send[i]) {
      fprintf(stderr, "recv[%d] = %g, expected %g\n", i, recv[i], send[i]);
      return 1;
    }
  }
  printf("version %d: all-reduce [%g %g %g %g]\n", version, recv[0], recv[1], recv[2], recv[3]);
  return 0;
}
EOF

# build_and_run NAME LIBRARY-DIR PKG-CONFIG-ARGS...: compiles prog.c with pkg-config's flags
# (PKG_CONFIG_PATH set by the caller) and runs it with LIBRARY-DIR on LD_LIBRARY_PATH.
build_and_run() {
  local name=$1 libdir=$2
  shift 2
  local flags
  if ! flags=$(pkg-config "$@" --cflags --libs squeeze 2>"$tmp/err"); then
    fail "$name: pkg-config $* --cflags --libs squeeze: $(cat "$tmp/err")"
    return
  fi
  echo "--- $name: $cc prog.c $flags"
  # shellcheck disable=SC2086  # the flags are words
  if ! (cd "$tmp" && $cc prog.c $flags -o "prog-$name") >"$tmp/out" 2>&1; then
    fail "$name: compiling and linking prog.c failed:"
    sed 's/^/    | /' "$tmp/out"
    return
  fi
  if ! (cd "$tmp" && LD_LIBRARY_PATH=$libdir timeout 60 "./prog-$name") >"$tmp/out" 2>&1; then
    fail "$name: the program failed:"
    sed 's/^/    | /' "$tmp/out"
    return
  fi
  # The library it ran with is the one pkg-config named, not one elsewhere on the machine.
  if ! LD_LIBRARY_PATH=$libdir ldd "$tmp/prog-$name" | grep -q "libsqueeze.so.0 => $libdir/"; then
    fail "$name: the program did not load libsqueeze from $libdir:"
    LD_LIBRARY_PATH=$libdir ldd "$tmp/prog-$name" | sed 's/^/    | /'
    return
  fi
  pass "$name: $(cat "$tmp/out")"
}

# The build tree: the library is in its root.
PKG_CONFIG_PATH="$build/meson-uninstalled" build_and_run build-tree "$build"

# An install into a scratch folder. pkg-config then finds squeeze.pc under it, and its prefix is
# moved there with --define-variable (an install into the configured prefix needs neither).
dest="$tmp/dest"
if ! "$meson" install -C "$build" --no-rebuild --quiet --destdir "$dest" >"$tmp/out" 2>&1; then
  fail "meson install --destdir failed:"
  sed 's/^/    | /' "$tmp/out"
else
  pc=$(find "$dest" -name squeeze.pc)
  if [ -z "$pc" ]; then
    fail "install: no squeeze.pc under $dest"
  else
    export PKG_CONFIG_PATH
    PKG_CONFIG_PATH=$(dirname "$pc")
    prefix=$(pkg-config --variable=prefix squeeze)
    moved=(--define-variable=prefix="$dest$prefix")
    # Nothing but the install may be on the compiler's command line.
    for f in $(pkg-config "${moved[@]}" --cflags --libs-only-L squeeze); do
      case $f in
        -I"$dest"/* | -L"$dest"/*) ;;
        *) fail "install: pkg-config gives $f, outside $dest" ;;
      esac
    done
    build_and_run install "$(pkg-config "${moved[@]}" --variable=libdir squeeze)" "${moved[@]}"
    unset PKG_CONFIG_PATH
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
