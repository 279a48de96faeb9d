"""python -m kvcache_lab.eval [--masks | --streaming] ...: the accuracy experiments on SmolLM2-135M-Instruct.

Without --masks, what each storage format costs (llama.cpp's perplexity protocol, see
formats.py); with --masks, what masks and eviction cost over a long stream (masks.py); with
--streaming, what positions within the cache do past the trained context (streaming.py).
--smoke runs a small version of the first (what CI runs)."""

import argparse

from kvcache_lab.eval import formats, masks, streaming


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masks", action="store_true", help="the masks and eviction experiment")
    parser.add_argument("--chunks", type=int, default=16, help="formats: chunks of --ctx tokens")
    parser.add_argument("--ctx", type=int, default=1024, help="formats: tokens per chunk")
    parser.add_argument("--prefill", type=int, default=256, help="tokens per step")
    parser.add_argument("--formats", help="formats: comma-separated row names (default: all)")
    parser.add_argument("--fake", action="store_true", help="formats: also fake quantization")
    parser.add_argument("--smoke", action="store_true", help="formats: fp32, fp16, int8, int4 on 2 chunks")
    parser.add_argument("--streams", type=int, default=2, help="masks: streams from the book")
    parser.add_argument("--stream", type=int, default=8192, help="masks: tokens per stream")
    parser.add_argument("--first", type=int, default=1024, help="masks: first token scored")
    parser.add_argument("--window", type=int, default=1024, help="masks: window and budget")
    parser.add_argument("--rows", help="masks: only these rows (names separated by ';')")
    parser.add_argument("--streaming", action="store_true",
                        help="the stream past the trained context (streaming.py)")
    parser.add_argument("--tokens", type=int, default=65536, help="streaming: the stream's length")
    parser.add_argument("--context", type=int, default=8192,
                        help="streaming: the trained context (spans, and the dense line's end)")
    parser.add_argument("--sinks", type=int, default=4, help="streaming: sinks")
    parser.add_argument("--bucket", type=int, default=1024, help="streaming: tokens per bucket")
    parser.add_argument("--text", choices=("books", "repeat"), default="books",
                        help="streaming: four books joined, or one passage of --context tokens "
                             "repeated (the control that holds the text still)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if args.streaming:
        print(streaming.HEADER)
        streaming.run(args.tokens, args.context, args.sinks, args.window, args.prefill,
                      args.bucket, args.json, args.rows.split(";") if args.rows else None,
                      args.text)
        return
    if args.masks:
        print(masks.HEADER)
        masks.run(args.streams, args.stream, args.first, args.window, args.prefill, 512,
                  args.json, args.rows.split(";") if args.rows else None)
        return
    names = formats.SMOKE if args.smoke else (args.formats.split(",") if args.formats else None)
    rows = [f for f in formats.FORMATS if names is None or f[0] in names]
    print(formats.HEADER)
    formats.run(rows, 2 if args.smoke else args.chunks, args.ctx, args.prefill, args.fake,
                args.json)


if __name__ == "__main__":
    main()
