#!/usr/bin/python3
"""Compares two sqz-allreduce-perf runs of the same command, e.g. before and after a refactor:
the text table (NAME.txt, stdout and stderr) and the -J file (NAME.json) in OLD_DIR and NEW_DIR,
with the timing columns, pids, date and the binary's path masked; everything else must match
byte for byte. Exit status 1 on a difference, which it prints.

Usage: scripts/perf-output-diff.py OLD_DIR NEW_DIR NAME...
Make the runs deterministic: SQZ_CODEC_AUTO_DENSE=0 (the pay-off guard decides on measured
time), SQZ_TUNER_CALIBRATE=0 or -a ALGO (the tuner's init-time measurement moves its picks).
"""
import json
import os
import re
import sys

# MASK_WIRE=1: also the -z columns the pay-off guard moves with timing (wire/rank, ratio), for
# runs made with the guard on.
WIRE = os.environ.get("MASK_WIRE") == "1"
TIMED = ("time_us", "algbw", "busbw") + (("wire_per_rank", "ratio") if WIRE else ())

def mask_text(path):
    out = []
    for line in open(path):
        line = re.sub(r"Pid +\d+", "Pid PID", line)
        line = re.sub(r"(Avg bus bandwidth +: )\S+", r"\1BW", line)
        c = line.split()
        if len(c) > 11 and c[0].isdigit():  # a result row
            # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong | rest
            for i in (5, 6, 7, 9, 10, 11) + ((15, 16) if WIRE and len(c) > 15 else ()):
                c[i] = "T"
            line = " ".join(c) + "\n"
        out.append(line)
    return out

def mask_json(path):
    text = open(path, "rb").read().decode("utf-8")
    d = json.loads(text)
    d["date"] = "DATE"
    d["command"] = d["command"].split(" ", 1)[1]  # drop the binary's path
    for r in d["rows"]:
        for k in TIMED:
            r[k] = "T"
    # And the layout, byte for byte, with the same fields masked in the text itself.
    t = re.sub(r'"(%s)": [^,}]+' % "|".join(TIMED), r'"\1": T', text)
    t = re.sub(r'"date": "[^"]*"', '"date": DATE', t)
    t = re.sub(r'"command": "[^ "]*', '"command": "BIN', t)
    return d, t

old, new, names = sys.argv[1], sys.argv[2], sys.argv[3:]
bad = 0
for name in names:
    a, b = mask_text(f"{old}/{name}.txt"), mask_text(f"{new}/{name}.txt")
    if a == b:
        print(f"{name}.txt: same ({len(a)} lines, timing and pids masked)")
    else:
        bad += 1
        print(f"{name}.txt: DIFFERS")
        for x, y in zip(a, b):
            if x != y:
                print("  old:", x.rstrip()); print("  new:", y.rstrip())
    (da, ta), (db, tb) = mask_json(f"{old}/{name}.json"), mask_json(f"{new}/{name}.json")
    if da == db and ta == tb:
        print(f"{name}.json: same ({len(da['rows'])} rows; values and masked bytes)")
    else:
        bad += 1
        print(f"{name}.json: DIFFERS (values {'same' if da == db else 'differ'}, "
              f"masked bytes {'same' if ta == tb else 'differ'})")
        for x, y in zip(ta.splitlines(), tb.splitlines()):
            if x != y:
                print("  old:", x[:300]); print("  new:", y[:300])
sys.exit(1 if bad else 0)
