#!/usr/bin/python3
"""Finds CUDA kernel launches whose blocks have one thread, in device/cuda.

A launch like kernel<<<1, 1, 0, stream>>> (or <<<dim3(1, jobs), 1>>>) runs its work on one thread
of the GPU: a serial loop where thousands of threads could run, and a launch's latency for a few
words where the kernel before or after could write them. Squeeze keeps none on a call's path
(issue 47); the CUDA stand-in cannot see a launch's geometry (it runs each kernel's CPU twin), so
this reads the launches from the source instead. Prints 'file:line: kernel' per such launch and
exits 1 when there is one; 0 otherwise.

Usage: scripts/one-thread-launches.py [--root DIR]
"""
import argparse
import os
import re
import sys


def split_top_level(args):
    """The comma-separated expressions of a launch configuration, ignoring nested commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts


def launches(text):
    """(offset, kernel name, [grid, block, ...]) for every <<<...>>> in text."""
    for m in re.finditer(r"(\w+)(?:<[^<>;]*>)?\s*<<<(.*?)>>>", text, re.S):
        yield m.start(), m.group(1), split_top_level(m.group(2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    folder = os.path.join(args.root, "device", "cuda")
    found = checked = 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith((".cu", ".cuh")):
            continue
        path = os.path.join(folder, name)
        with open(path) as f:
            text = f.read()
        for offset, kernel, config in launches(text):
            checked += 1
            if len(config) >= 2 and config[1] == "1":
                line = text.count("\n", 0, offset) + 1
                print(f"device/cuda/{name}:{line}: {kernel} is launched with one thread a block")
                found += 1
    if checked == 0:
        print(f"no kernel launch found under {folder}: is --root right?")
        return 1
    print(f"{checked} launches in device/cuda, {found} with one thread a block")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
