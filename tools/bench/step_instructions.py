#!/usr/bin/env python3
"""Instructions a planned decode step spends outside cpu-tbb's kernels, counted by callgrind.

Wall-clock time outside the kernels is a few microseconds a step on a shared host, inside the
noise of the kernels' own time; instruction counts are the same from run to run, so two builds
compare exactly. One CPU (taskset), so that every item runs on the thread callgrind follows.

  tools/bench/step_instructions.py build/bin/kvcache [OLD/bin/kvcache --function PATTERN]

PATTERN names what times one planned step in that build's `kvcache bench step` (callgrind's
--toggle-collect): this tree's time_planned_step by default; 6caf690's is its second lambda,
'*Samples&)#2}::operator()*'.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

KERNELS = "kvcache::cpu::LayerRun::for_each_item<"
STEP = ["bench", "step", "--batch", "1", "--layers", "32", "--tokens", "64", "--steps", "10"]
STEPS = 11  # the measured steps and one warm-up step


def inclusive(annotated, prefix):
    total = 0
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S+?:(.*)", line)
        if m and m.group(2).startswith(prefix):
            total += int(m.group(1).replace(",", ""))
    return total


def count(tool, pattern):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["taskset", "-c", "0", "valgrind", "--tool=callgrind",
                        f"--callgrind-out-file={out}", f"--toggle-collect={pattern}", tool, *STEP],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                                   check=True, capture_output=True, text=True).stdout
    m = re.search(r"([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", annotated)
    if not m:
        sys.exit(f"{tool}: callgrind counted nothing under {pattern}")
    return int(m.group(1).replace(",", "")), inclusive(annotated, KERNELS)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tool")
    p.add_argument("old", nargs="?")
    p.add_argument("--function", default="*time_planned_step*",
                   help="OLD's step function, for callgrind's --toggle-collect")
    a = p.parse_args()
    runs = [(a.tool, "*time_planned_step*")] + ([(a.old, a.function)] if a.old else [])
    print("build\tper step\tkernels\toutside the kernels")
    for tool, pattern in runs:
        total, kernels = count(tool, pattern)
        print(f"{tool}\t{total // STEPS}\t{kernels // STEPS}\t{(total - kernels) // STEPS}")


if __name__ == "__main__":
    main()
