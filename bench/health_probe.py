"""Health latency and a server's resident memory, sampled from a process of their own.

    python -m bench.health_probe ADDRESS --pid PID --out FILE.json   # until SIGTERM/SIGINT

A poller inside a busy benchmark process would wait for that process's own interpreter
lock and report its stalls as the server's; this one shares nothing with the load it
watches. It writes ``{"latencies": [s, ...], "not_serving": n, "rss": [[t, bytes], ...]}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.health_probe", description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--pid", type=int, default=0, help="the server's process id, for its RSS")
    parser.add_argument("--out", required=True, help="where the figures go when it stops")
    parser.add_argument("--interval", type=float, default=0.025, help="seconds between health checks")
    parser.add_argument("--rss-interval", type=float, default=1.0, help="seconds between RSS samples")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    latencies: list[float] = []
    rss: list[tuple[float, int]] = []
    not_serving = 0
    began = last_rss = time.monotonic()
    with grpc.insecure_channel(args.address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        while not stop.is_set():
            start = time.perf_counter()
            try:
                if check(health_pb2.HealthCheckRequest(), timeout=10).status != health_pb2.HealthCheckResponse.SERVING:
                    not_serving += 1
            except grpc.RpcError:
                not_serving += 1
            latencies.append(time.perf_counter() - start)
            now = time.monotonic()
            if args.pid and now - last_rss >= args.rss_interval:
                rss.append((now - began, rss_bytes(args.pid)))
                last_rss = now
            stop.wait(args.interval)
    Path(args.out).write_text(json.dumps({"latencies": latencies, "not_serving": not_serving, "rss": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
