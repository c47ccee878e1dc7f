#!/usr/bin/env python3
"""compile_commands.json from make's own compile lines: reads `make -n -B` output on stdin and
writes one entry per compile command (g++ / nvcc with -c) to stdout. `make compile_commands.json`
runs it. Objects built twice (the AVX-512 kernel variants) appear twice; clangd takes the first."""
import json
import os
import shlex
import sys

root = os.getcwd()
entries = []
for line in sys.stdin:
    line = line.strip()
    if not line or " -c " not in line:
        continue
    try:
        args = shlex.split(line)
    except ValueError:
        continue
    tool = os.path.basename(args[0])
    if tool not in ("g++", "c++", "clang++", "nvcc", "gcc", "cc", "clang"):
        continue
    src = args[args.index("-c") + 1]
    entries.append({"directory": root, "file": os.path.join(root, src), "arguments": args})
json.dump(entries, sys.stdout, indent=1)
sys.stdout.write("\n")
