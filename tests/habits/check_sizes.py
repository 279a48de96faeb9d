#!/usr/bin/env python3
"""Rooms of a size one can hold in mind: no source file over 500 lines and no function over 100.

Checks every tracked C, C++, CUDA and Python source outside tests/ (and not a *_test file). The C
ABI header is one file on purpose (a third party reads it whole), and GPU kernels (__global__)
may be long: their stages are device functions, the kernel the schedule that calls them.
Function lengths come from lizard (pinned in tools/python-requirements.txt).

    check_sizes.py REPO
"""
import pathlib
import subprocess
import sys

import lizard

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 100
WHOLE_FILES = {"core/include/kvcache/plugin_abi.h"}
SUFFIXES = (".c", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".py")


def sources(repo):
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others",
                             "--exclude-standard"], check=True, capture_output=True,
                            text=True).stdout.split()
    for name in sorted(set(listed)):
        path = repo / name
        if (name.endswith(SUFFIXES) and not name.startswith("tests/")
                and not pathlib.PurePath(name).stem.endswith("_test") and path.is_file()):
            yield name, path


def is_kernel(lines, function):
    # The declaration's first lines, up to the name: a __global__ function is a GPU kernel.
    start = max(function.start_line - 3, 0)
    return any("__global__" in line for line in lines[start:function.start_line])


def main():
    repo = pathlib.Path(sys.argv[1])
    problems = []
    files = 0
    for name, path in sources(repo):
        files += 1
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        if len(lines) > MAX_FILE_LINES and name not in WHOLE_FILES:
            problems.append(f"{name}: {len(lines)} lines (at most {MAX_FILE_LINES})")
        analysis = lizard.analyze_file.analyze_source_code(name, text)
        for function in analysis.function_list:
            if function.length > MAX_FUNCTION_LINES and not is_kernel(lines, function):
                problems.append(f"{name}:{function.start_line}: {function.long_name.split('(')[0]}"
                                f" is {function.length} lines (at most {MAX_FUNCTION_LINES})")
    for p in problems:
        print(p)
    print(f"{files} sources: {len(problems)} over the limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
