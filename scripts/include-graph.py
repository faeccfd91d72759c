#!/usr/bin/python3
"""The folder-level include graph of Squeeze, read from the #include "..." lines.

Prints one line per edge, 'from -> to (n includes)', then checks every edge against LAYERS:
the folders each folder may include (docs/architecture.md draws the same table). Exit status 1
and one line per offending include when a folder includes one it may not.

Usage: scripts/include-graph.py [--root DIR] [--all]
  --all  also print the edges within one folder (hidden by default).
"""
import argparse
import os
import re
import sys

# Folder -> the folders it may include, lowest layer first. A folder always includes itself.
# 'config' is the generated squeeze_config.h (build options), usable from every layer.
LIBRARY = ["include", "config", "base", "device", "compress", "algorithms", "transports",
           "src/bootstrap", "src/core", "src/api"]
LAYERS = {
    "include": [],
    "config": [],
    "base": ["include", "config"],
    "device": ["include", "config", "base"],
    "compress": ["include", "config", "base", "device"],
    "algorithms": ["include", "config", "base"],
    "transports": ["include", "config", "base", "device"],
    "src/bootstrap": ["include", "config", "base", "transports"],
    "src/core": ["include", "config", "base", "device", "compress", "algorithms", "transports",
                 "src/bootstrap"],
    "src/api": ["include", "config", "base", "device", "compress", "algorithms", "transports",
                "src/bootstrap", "src/core"],
}
# Tools and tests sit on top of the library: they may include any of it, and each other.
TOOLS = ["src/info", "src/launcher", "src/nccl_shim", "python", "perf", "tests", "examples"]
for tool in TOOLS:
    LAYERS[tool] = LIBRARY + TOOLS

SOURCE = re.compile(r"\.(cc|h|cu|cuh|c|hpp|cpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SEARCH = [".", "include", "src"]  # meson's include_directories for the library


def folder_of(path):
    """The layer a repository path belongs to, or None for files outside the layers."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return "src/" + parts[1]
    if len(parts) > 1 and (parts[0] in LAYERS or parts[0] == "include"):
        return parts[0]
    return None


def resolve(root, including, name):
    """The repository path an #include names, or a pseudo-folder, or None (not Squeeze's)."""
    if name == "squeeze_config.h":
        return "config/squeeze_config.h"
    here = os.path.dirname(including)
    for base in [here] + SEARCH:
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--all", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    edges, bad = {}, []
    for top in sorted(set(f.split("/")[0] for f in LAYERS)):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for filename in sorted(filenames):
                if not SOURCE.search(filename):
                    continue
                path = os.path.relpath(os.path.join(dirpath, filename), root)
                source = folder_of(path)
                if source is None:
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for name in INCLUDE.findall(text):
                    target_path = resolve(root, path, name)
                    target = folder_of(target_path) if target_path else None
                    if target is None:
                        continue
                    edges[(source, target)] = edges.get((source, target), 0) + 1
                    if target != source and target not in LAYERS.get(source, []):
                        bad.append(f"{path}: #include \"{name}\" ({source} may not include "
                                   f"{target})")
    for (source, target), n in sorted(edges.items()):
        if source != target or args.all:
            print(f"{source} -> {target} ({n})")
    if bad:
        print(f"\n{len(bad)} includes against the layering (scripts/include-graph.py LAYERS, "
              "docs/architecture.md):", file=sys.stderr)
        for line in bad:
            print("  " + line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
