#!/usr/bin/env python3
"""Two builds' decode attention side by side: `kvcache bench attention` of each, taking turns.

For every (case, format) each round runs build A then build B (B then A in odd rounds), so that
the host's other tenants weigh on both alike; reported is B's tokens/s over A's in the same
round, median and range over the rounds. Extra arguments go to both builds' `bench attention`.

    tools/bench/attention_ab.py OLD/bin/kvcache NEW/bin/kvcache --rounds 8 \\
        --formats fp16,int4-group --cases 4096x1,32768x1 -- --threads 1
"""
import argparse
import json
import statistics
import subprocess


def tokens_per_second(kvcache, fmt, tokens, batch, seconds, extra):
    out = subprocess.run([kvcache, "bench", "attention", "--format", fmt, "--tokens", str(tokens),
                          "--batch", str(batch), "--min-seconds", str(seconds), "--json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tokens_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the first build's kvcache tool (the baseline)")
    parser.add_argument("b", help="the second build's kvcache tool")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--formats", default="fp16,int8-per-token,int4-group")
    parser.add_argument("--cases", default="4096x1,32768x1", help="comma-separated TOKENSxBATCH")
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--a-args", default="", help="arguments for build A only, space-separated")
    parser.add_argument("--b-args", default="", help="arguments for build B only, space-separated")
    parser.add_argument("--json", help="write every measurement here")
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    builds = {"a": (args.a, args.a_args.split()), "b": (args.b, args.b_args.split())}
    runs = []
    for r in range(args.rounds):
        for tokens, batch in cases:
            for fmt in args.formats.split(","):
                for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                    tool, own = builds[side]
                    runs.append({"round": r, "tokens": tokens, "batch": batch, "format": fmt,
                                 "build": side,
                                 "tokens_per_second": tokens_per_second(
                                     tool, fmt, tokens, batch, args.min_seconds, extra + own)})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f)
    print("| format | tokens | batch | A tokens/s | B tokens/s | B / A (range) |")
    print("|---|---|---|---|---|---|")
    for tokens, batch in cases:
        for fmt in args.formats.split(","):
            of = {side: {x["round"]: x["tokens_per_second"] for x in runs
                         if (x["tokens"], x["batch"], x["format"], x["build"]) ==
                         (tokens, batch, fmt, side)} for side in "ab"}
            ratios = [of["b"][r] / of["a"][r] for r in of["a"]]
            print(f"| {fmt} | {tokens} | {batch} | {statistics.median(of['a'].values()):.0f} "
                  f"| {statistics.median(of['b'].values()):.0f} | {statistics.median(ratios):.3f} "
                  f"({min(ratios):.2f}–{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
