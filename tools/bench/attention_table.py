#!/usr/bin/env python3
"""The README's decode-attention table: `kvcache bench attention` over formats and cases, in rounds.

Each round runs every (case, format) once, in the table's order, so that a host's other tenants
coming and going weigh on every format alike; "vs fp16" is a format's tokens/s over fp16's in the
same round (median and range over the rounds). The other columns are medians over the rounds.

    tools/bench/attention_table.py --rounds 12 [--json rounds.json] [--kvcache build/bin/kvcache]
"""
import argparse
import json
import statistics
import subprocess
import sys

FORMATS = ["fp16", "bf16", "int8-per-token", "int4-group", "int4-group:group=64",
           "int4-group:group=128", "fp8-e4m3"]
CASES = "4096x1,4096x8,32768x1,32768x8"  # tokens x batch


def measure(kvcache, fmt, tokens, batch, seconds):
    out = subprocess.run([kvcache, "bench", "attention", "--format", fmt, "--tokens", str(tokens),
                          "--batch", str(batch), "--min-seconds", str(seconds), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def table(runs, formats, cases):
    lines = ["| format | tokens | batch | KV MB per call | GB/s | fraction of read bw | tokens/s "
             "| vs fp16 |", "|---|---|---|---|---|---|---|---|"]
    bandwidths = [r["read_bandwidth_gbps"] for r in runs]
    for tokens, batch in cases:
        case = [r for r in runs if r["tokens"] == tokens and r["batch"] == batch]
        base = {r["round"]: r["tokens_per_second"] for r in case if r["format"] == "fp16"}
        for fmt in formats:
            rows = [r for r in case if r["format"] == fmt]
            if not rows:
                continue
            ratios = [r["tokens_per_second"] / base[r["round"]] for r in rows if r["round"] in base]
            vs = (f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}–{max(ratios):.2f})"
                  if ratios else "—")
            lines.append(f"| {fmt} | {tokens} | {batch} | {rows[0]['kv_bytes'] / 1e6:.1f} "
                         f"| {median(rows, 'gbps'):.1f} | {median(rows, 'bandwidth_fraction'):.2f} "
                         f"| {median(rows, 'tokens_per_second'):.0f} | {vs} |")
    lines.append(f"\nread bandwidth during the rounds: {min(bandwidths):.1f}–{max(bandwidths):.1f} "
                 "GB/s")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help="comma-separated; fp16 must be among them for the ratios")
    parser.add_argument("--cases", default=CASES, help="comma-separated TOKENSxBATCH")
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument("--kvcache", default="build/bin/kvcache")
    parser.add_argument("--json", help="also write every measurement here")
    args = parser.parse_args()
    formats = args.formats.split(",")
    cases = [tuple(int(n) for n in case.split("x")) for case in args.cases.split(",")]
    runs = []
    for n in range(args.rounds):
        for tokens, batch in cases:
            for fmt in formats:
                run = measure(args.kvcache, fmt, tokens, batch, args.min_seconds)
                runs.append(dict(run, round=n, format=fmt))
        print(f"round {n + 1} of {args.rounds}", file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(runs, f)
    print(table(runs, formats, cases))


if __name__ == "__main__":
    main()
