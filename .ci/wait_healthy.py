"""Waits until the server at ADDRESS reports SERVING on grpc.health.v1 (or times out)."""

import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

address, timeout = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + timeout
with grpc.insecure_channel(address) as channel:
    stub = health_pb2_grpc.HealthStub(channel)
    while time.monotonic() < deadline:
        try:
            if stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                print(f"server at {address} is SERVING")
                sys.exit(0)
        except grpc.RpcError:
            pass
        time.sleep(0.5)
sys.exit(f"server at {address} not SERVING after {timeout:.0f}s")
