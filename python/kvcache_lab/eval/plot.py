"""python -m kvcache_lab.eval.plot RESULT_JSON OUT_SVG: the masks or streaming experiment's perplexity per
bucket of tokens, one line per row, as a plain SVG (no plotting library needed)."""

import json
import math
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def title(result):
    if "title" in result:
        return result["title"]
    return (f'Perplexity per {result["bucket"]}-token bucket (log scale), {result["streams"]} '
            f'streams of {result["stream"]} tokens, window {result["window"]}')


def svg(result, width=760, height=420, margin=60):
    rows = result["rows"]
    buckets = max(len(r["bucket_perplexity"]) for r in rows)
    values = [v for r in rows for v in r["bucket_perplexity"]]
    low, high = math.log(min(values)), math.log(max(values))
    x = lambda i: margin + i * (width - 2 * margin - 200) / max(1, buckets - 1)
    y = lambda v: height - margin - (math.log(v) - low) / max(1e-9, high - low) * (height - 2 * margin)
    first, size = result["first_scored"], result["bucket"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{margin}" y="20" font-size="13">{title(result)}</text>',
           f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin - 200}" '
           f'y2="{height - margin}" stroke="black"/>',
           f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" stroke="black"/>']
    for i in range(0, buckets, max(1, buckets // 7)):
        out.append(f'<text x="{x(i):.0f}" y="{height - margin + 16}" text-anchor="middle">'
                   f'{first + i * size}</text>')
    for k in range(5):
        v = math.exp(low + k * (high - low) / 4)
        out.append(f'<text x="{margin - 6}" y="{y(v) + 4:.0f}" text-anchor="end">{v:.1f}</text>')
    for n, r in enumerate(rows):
        colour = COLOURS[n % len(COLOURS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(r["bucket_perplexity"]))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        out.append(f'<text x="{width - margin - 190}" y="{margin + 14 * n}" fill="{colour}">'
                   f'{r["row"]}</text>')
    out.append(f'<text x="{(width - 200) / 2:.0f}" y="{height - 16}" text-anchor="middle">'
               f'position of the scored token</text></svg>')
    return "\n".join(out) + "\n"


def main():
    with open(sys.argv[1]) as f:
        result = json.load(f)
    with open(sys.argv[2], "w") as f:
        f.write(svg(result))


if __name__ == "__main__":
    main()
