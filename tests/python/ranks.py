"""Starts N copies of a test script as ranks of one job, with torch's environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and waits for them with a deadline.

A test script calls run_ranks(n, __file__) in its parent process; each rank runs the script
again with SQZ_TEST_RANK set (is_rank() is then true) and does its part. The parent fails the
test when any rank exits non-zero, and kills every rank when the deadline passes, so a hang
fails the test instead of blocking the suite. Exit 77 (skip) from every rank skips the test.
"""
import os
import socket
import subprocess
import sys
import time

SKIP = 77


def is_rank():
    return "SQZ_TEST_RANK" in os.environ


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(n, script, args=(), deadline_s=120, env=None):
    """Runs `script` as n ranks; returns 0, SKIP, or 1 after printing what failed."""
    port = free_port()
    procs = []
    for rank in range(n):
        e = dict(os.environ)
        e.update(env or {})
        e.update({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port), "SQZ_TEST_RANK": str(rank)})
        procs.append(subprocess.Popen([sys.executable, script, *args], env=e))
    end = time.monotonic() + deadline_s
    codes = [None] * n
    while any(c is None for c in codes) and time.monotonic() < end:
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
        time.sleep(0.05)
    hung = [i for i, c in enumerate(codes) if c is None]
    for i in hung:
        procs[i].kill()
        procs[i].wait()
    if hung:
        print(f"ranks {hung} still running after {deadline_s} s: killed (a hang)", flush=True)
        return 1
    if all(c == SKIP for c in codes):
        return SKIP
    bad = [(i, c) for i, c in enumerate(codes) if c != 0]
    if bad:
        print("ranks failed (rank, exit status): " + ", ".join(f"({i}, {c})" for i, c in bad),
              flush=True)
        return 1
    return 0


def skip(reason):
    """Prints why and exits with the skip status."""
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


def require(*names):
    """Imports each module named (for a test that needs them), or skips saying which failed."""
    import importlib
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        skip(f"cannot import {', '.join(names)} ({e})")


def import_numpy_and_squeeze():
    """numpy and squeeze, or skip saying which is missing."""
    try:
        import numpy
    except ImportError as e:
        skip(f"numpy does not import: {e}")
    try:
        import squeeze
    except ImportError as e:
        skip(f"the squeeze package does not import (is PYTHONPATH build/python?): {e}")
    return numpy, squeeze
