#!/usr/bin/env python3
"""The remote tier's figures on loopback, against the servers' own tools, in one run.

Starts a redis-server and a memcached of its own on free loopback ports and, per transport and
format, runs `kvcache bench tier` (writes, lookups of 16/128/1,024 pages, pulls, pulling against
recomputing); beside it, `redis-benchmark` GET of the same value size on one connection,
pipelined 16 deep (as the transport reads), and raw loopback TCP. Prints a Markdown table.
This host's neighbours move any one figure by up to 2x, so each row takes `--rounds` turns of the
bench and redis-benchmark back to back (the store emptied before each) and gives medians, with
pull / GET as the median of the rounds' ratios and their range.

    tools/bench/tier_table.py build/bin/kvcache --pages 1024 --formats fp16,int8-per-token,int4-group
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, port):
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{argv[0]} did not start")


def loopback_gbps(seconds=1.0):
    """Bytes one TCP connection moves over loopback per second, 1 MB writes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = [0]

    def sink():
        connection, _ = server.accept()
        while data := connection.recv(1 << 20):
            received[0] += len(data)
        connection.close()

    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(server.getsockname())
    block = b"x" * (1 << 20)
    start_time = time.perf_counter()
    while time.perf_counter() - start_time < seconds:
        client.sendall(block)
    client.close()
    thread.join()
    elapsed = time.perf_counter() - start_time
    server.close()
    return received[0] / elapsed / 1e9


def redis_get_gbps(port, value_bytes):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-d",
                          str(value_bytes), "-n", "2000", "-c", "1", "-P", "16", "-q"],
                         capture_output=True, text=True).stdout
    rates = re.findall(r"GET: ([0-9.]+) requests per second", out)
    return float(rates[-1]) * value_bytes / 1e9 if rates else float("nan")


def flush(transport, port):
    """Empties the server, so that each round writes every page again."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"FLUSHALL\r\n" if transport == "resp" else b"flush_all\r\n")
        c.recv(64)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kvcache", help="the kvcache tool")
    parser.add_argument("--pages", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="of the bench and GET, per row")
    parser.add_argument("--formats", default="fp16,int8-per-token,int4-group")
    parser.add_argument("--transports", default="resp,memcached")
    parser.add_argument("--model", default="smollm2-135m", help="a model preset")
    args = parser.parse_args()

    servers, endpoints = [], {}
    if "resp" in args.transports:
        port = free_port()
        servers.append(start(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                              "no", "--maxmemory", "4gb"], port))
        endpoints["resp"] = port
    if "memcached" in args.transports:
        port = free_port()
        user = ["-u", "root"] if os.geteuid() == 0 else []
        servers.append(start(["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m",
                              "4096", "-I", "4m", *user], port))
        endpoints["memcached"] = port
    folder = tempfile.mkdtemp()
    try:
        loopback = loopback_gbps()
        print(f"raw loopback TCP, one connection: {loopback:.2f} GB/s\n")
        print("| transport | format | value bytes | write GB/s | lookup 16 / 128 / 1,024 pages: "
              "p50 (p99) us | pull GB/s (all pages) | redis-benchmark GET GB/s | pull / GET | "
              "pull beats recomputing from | dead store: lookups until its breaker opens / "
              "p50 after, us |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for transport in args.transports.split(","):
            for fmt in args.formats.split(","):
                config = os.path.join(folder, f"{transport}-{fmt}.yaml")
                with open(config, "w") as f:
                    f.write(f"model: {{preset: {args.model}}}\nbackend: [cpu-tbb]\n"
                            f"format: {fmt}\n"
                            f"remote: {{transport: {transport}, endpoints: "
                            f"['127.0.0.1:{endpoints[transport]}'], model: bench@1}}\n")
                runs, gets = [], []
                for _ in range(args.rounds):
                    flush(transport, endpoints[transport])
                    out = subprocess.run([args.kvcache, "--config", config, "bench", "tier",
                                          "--pages", str(args.pages), "--repeats",
                                          str(args.repeats), "--json"],
                                         check=True, capture_output=True, text=True).stdout
                    runs.append(json.loads(out))
                    value = runs[-1]["write"]["value_bytes"]
                    gets.append(redis_get_gbps(endpoints["resp"], value)
                                if "resp" in endpoints else float("nan"))
                r = runs[len(runs) // 2]  # for the figures not taken as medians
                lookups = " / ".join(f"{l['p50_us']:.0f} ({l['p99_us']:.0f})" for l in r["lookups"])
                pulls = [run["lengths"][-1]["pull_gbps"] for run in runs]
                ratios = [p / g for p, g in zip(pulls, gets)]
                dead = r["dead_store"]
                until = ", ".join(f"{us:.0f}" for us in dead["until_open_us"])
                write = median([run["write"]["gbps"] for run in runs])
                print(f"| {transport} | {fmt} | {value} | {write:.2f} | {lookups} | "
                      f"{median(pulls):.2f} | {median(gets):.2f} | {median(ratios):.2f} "
                      f"({min(ratios):.2f}-{max(ratios):.2f}) | "
                      f"{r['break_even_pages']} page(s) | {until} / {dead['after_p50_us']:.0f} |")
    finally:
        for s in servers:
            s.kill()
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
