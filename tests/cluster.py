"""A scale-out cluster on 127.0.0.1: server replicas and SMG in front, as processes.

Every wait is bounded: starting, probing, reading a stream and stopping all take
a timeout and raise (with the log's tail) instead of hanging. Replicas load their
model through a path relative to their own working directory, which the gateway
(started elsewhere) cannot open: it must fetch the tokenizer with GetTokenizer,
as it does when replicas run on other machines.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smg_executable() -> str | None:
    """The ``smg`` command of this environment (the test extra installs it)."""
    beside = Path(sys.executable).with_name("smg")
    return str(beside) if beside.exists() else shutil.which("smg")


class Process:
    """A child process in its own session, its output in ``log_path``."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, cwd: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "NO_COLOR": "1"}
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def check(self) -> None:
        if not self.alive:
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.log_tail()}")

    def wait_until(self, ready, timeout: float, what: str) -> None:
        """Polls ``ready()`` until true; raises after ``timeout`` seconds or if the process dies."""
        deadline = time.monotonic() + timeout
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {what} not within {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def freeze(self) -> None:
        """SIGSTOP: the process stops where it is, its connections open, until killed."""
        self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, mid-request."""
        if self.alive:
            self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Replica(Process):
    """``mlx-grpc serve`` on one model, with its Prometheus endpoint. The server binds
    free ports itself (``--port 0``) and logs them; they are read from its log on first
    use, so no other process can take a port between its choice and its bind."""

    PORTS = (("port", re.compile(r"listening on port (\d+)")),
             ("metrics_port", re.compile(r"metrics on http://[^/\s]+:(\d+)/metrics")))

    def __init__(self, name: str, model_dir: Path, log_dir: Path, *extra: str):
        embedding = () if "--embedding-model" in extra else ("--no-embedding",)
        # tokenless, as behind SMG (1.13 sends no token to its gRPC workers): every caller holds the
        # router role, so the gateway receives KV events and global loads, and tests may FlushCache
        argv = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", "0",
                "--model", f"{model_dir.name}={model_dir.name}", *embedding, "--grace", "2",
                "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--anonymous-role", "router", *extra]
        super().__init__(name, argv, log_dir, cwd=model_dir.parent)
        self._ports: dict[str, int] = {}
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.InferenceServiceStub | None = None

    def _bound(self, which: str) -> int:
        if len(self._ports) < len(self.PORTS):
            def logged() -> bool:
                text = self.log_path.read_text(errors="replace")
                for key, pattern in self.PORTS:
                    if key not in self._ports and (m := pattern.search(text)):
                        self._ports[key] = int(m.group(1))
                return len(self._ports) == len(self.PORTS)

            self.wait_until(logged, 120, "its bound ports in the log")
        return self._ports[which]

    @property
    def port(self) -> int:
        return self._bound("port")

    @property
    def metrics_port(self) -> int:
        return self._bound("metrics_port")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.address)
        return self._channel

    @property
    def stub(self) -> pb_grpc.InferenceServiceStub:
        if self._stub is None:
            self._stub = pb_grpc.InferenceServiceStub(self.channel)
        return self._stub

    def serving(self) -> bool:
        try:
            status = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
        return status.status == health_pb2.HealthCheckResponse.SERVING

    def load(self) -> pb.ModelLoad:
        return self.stub.GetLoad(pb.GetLoadRequest(), timeout=10).models[0]

    def metrics(self) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def stop(self, timeout: float = 15.0) -> None:
        if self._channel is not None:
            self._channel.close()
        super().stop(timeout)


class Gateway(Process):
    """``smg launch`` in front of ``replicas``, OpenAI HTTP on ``port``."""

    def __init__(self, replicas: list[Replica], log_dir: Path, policy: str = "cache_aware", *extra: str,
                 name: str = "smg"):
        self.port, self.prometheus_port = free_port(), free_port()
        self.replicas = replicas
        argv = [smg_executable() or "smg", "launch", "--host", "127.0.0.1", "--port", str(self.port),
                "--worker-urls", *(f"grpc://{r.address}" for r in replicas), "--policy", policy,
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.prometheus_port),
                "--log-level", "warn", *extra]
        super().__init__(name, argv, log_dir, cwd=log_dir)

    def ready(self) -> bool:
        return self.healthy_workers() == len(self.replicas)

    def healthy_workers(self) -> int | None:
        """The workers the gateway's health checks hold healthy (None: no answer)."""
        try:
            status, body = self.request("GET", "/readiness", timeout=2)
            return int(json.loads(body).get("healthy_workers", 0)) if status in (200, 503) else None
        except (OSError, ValueError):
            return None

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"content-type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def chat(self, body: dict, timeout: float = 60) -> dict:
        return self.post("/v1/chat/completions", body, timeout)

    def post(self, path: str, body: dict, timeout: float = 60) -> dict:
        status, text = self.request("POST", path, body, timeout)
        if status != 200:
            raise GatewayError(status, text)
        return json.loads(text)

    def stream_chat(self, body: dict, timeout: float = 60) -> "SseStream":
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}),
                     headers={"content-type": "application/json"})
        return SseStream(conn, conn.getresponse())


class GatewayError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class SseStream:
    """A streamed chat completion, read event by event (each read bounded by the
    connection's timeout). ``close`` drops the connection: a client disconnect."""

    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse
    events: list[dict] = field(default_factory=list)

    def __iter__(self) -> Iterator[dict]:
        if self.response.status != 200:
            raise GatewayError(self.response.status, self.response.read().decode())
        for raw in self.response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:
                raise GatewayError(500, data)
            self.events.append(event)
            yield event
        raise GatewayError(0, "the stream ended without [DONE]")

    def text(self) -> str:
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in self.events if e.get("choices"))

    def close(self) -> None:
        self.conn.close()
