"""The grpc.aio server: InferenceService, SMG's worker contract, health, reflection, graceful drain.

Invariant: health is SERVING only while every model is ready and the server is not draining;
interceptors run observation, then identity, then the call budgets, then the drain check.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from smg_grpc_proto import mlx_engine_pb2_grpc as mlx_grpc
from smg_grpc_proto import vllm_engine_pb2_grpc as vllm_grpc

from engine.models import ModelSet
from engine.settings import setting
from engine.validation import Limits

from . import tracing
from .access_log import AccessLog
from .auth import AuthInterceptor, is_loopback_host
from .bearer_tokens import TokenTable
from .budgets import BudgetInterceptor, CallBudgets
from .calls import Observer
from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from .interceptors import DrainInterceptor, ObservingInterceptor, ServerState
from .metrics import Metrics
from .servicer import InferenceServicer
from .status import MAX_MESSAGE_BYTES, status_of
from .watchdog import BROKEN_GRACE_S, EXIT_ENGINE_BROKEN, watch
from .wire_budget import WireBudgetInterceptor
from .worker.servicer import SERVICE_NAME as WORKER_SERVICE_NAME
from .worker.servicer import WorkerServicer
from .worker.vllm import SERVICE_NAME as VLLM_SERVICE_NAME
from .worker.vllm import VllmWorkerServicer

log = logging.getLogger("service.server")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["InferenceService"].full_name
# Gateways ping idle connections; grpc's defaults would answer with GOAWAY (too_many_pings).
KEEPALIVE = [("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.min_ping_interval_without_data_ms", 10_000)]
FLUSH_S = 1.0  # after the drain: time for the last statuses to leave and health watches to end
# What an RPC still running when the grace period ends gets.
CUT = status_of(grpc.StatusCode.UNAVAILABLE, "DRAINING",
                "the server shut down before this call finished; retry on another replica",
                retry_after_s=1.0)


@dataclass(frozen=True)
class ServerOptions:
    """How the server runs (``setting`` fields are ``mlx-grpc serve``'s flags)."""

    reflection: bool = setting(True, "turn server reflection off")
    max_message_bytes: int = setting(MAX_MESSAGE_BYTES, "max gRPC message size")
    grace_s: float = setting(10.0, "seconds in-flight streams get on shutdown", flag="--grace")
    engine_stall_timeout_s: float = setting(
        60.0, "a model whose engine thread is busy this long on one step is broken: its requests fail "
              f"UNAVAILABLE (ENGINE_DEAD) and the server exits with status {EXIT_ENGINE_BROKEN} (a thread that "
              "dies does so at once); 0 turns the stall check off", flag="--engine-stall-timeout", metavar="SECONDS")
    otlp_endpoint: str | None = setting(
        None, "trace Generate RPCs with OpenTelemetry, exported over OTLP/gRPC to this collector (e.g. "
              "http://localhost:4317); $OTEL_EXPORTER_OTLP_ENDPOINT does too; needs the 'tracing' extra",
        type=str, metavar="URL")
    tracer_provider: object | None = None  # an OpenTelemetry TracerProvider to trace into (wins over the endpoint)
    auth_tokens: tuple[str, ...] = ()  # bare tokens: tenant "default", role inference
    auth_table: TokenTable = TokenTable()  # the tokens file's; with auth_tokens empty: no authentication
    auth_open_reflection: bool = setting(False, "serve reflection without a token (health is always open)")
    admin_loopback: bool = setting(
        False, "without auth tokens, give callers on this machine (loopback, unix sockets) the admin role "
               "(adapters, KV events, FlushCache, every tenant's loads); behind a same-host proxy or sidecar "
               "(e.g. Istio, whose inbound arrives from 127.0.0.6) every remote caller would be admin")
    anonymous_role: str = setting(
        "inference", "without auth tokens, the role every caller holds: router lets a gateway that sends no token "
                     "(SMG 1.13 sends none to its gRPC workers) receive KV events, every tenant's loads and "
                     "FlushCache; only for replicas no one but the gateway reaches", choices=("inference", "router"))
    insecure_open: bool = setting(False, "allow a non-loopback --host without auth tokens (anyone reaching it "
                                         "may generate)")
    max_concurrent_rpcs: int = setting(1024, "RPCs served at once, health checks and anonymous streams not "
                                             "counted; beyond it RESOURCE_EXHAUSTED (TOO_MANY_RPCS) (0: unbounded)")
    max_anonymous_streams: int = setting(16, "streaming calls open at once by callers without a token (health "
                                             "Watch, open reflection), apart from --max-concurrent-rpcs; beyond "
                                             "it RESOURCE_EXHAUSTED (0: unbounded)")
    max_streams_per_tenant: int = setting(256, "streaming calls a tenant of the tokens file has open at once, "
                                               "unless its max_streams says otherwise; beyond it "
                                               "RESOURCE_EXHAUSTED (TENANT_STREAMS_EXHAUSTED) (0: unbounded)")
    metrics_port: int | None = setting(None, "serve Prometheus metrics on this HTTP port (off by default; 0 "
                                             "picks one)", type=int)
    metrics_host: str = setting("127.0.0.1", "address of the metrics endpoint (0.0.0.0 for every interface: "
                                             "it names every tenant)")
    access_log: bool = setting(True, "no per-RPC line on the service.access logger")
    smg_worker: bool = setting(True, "do not serve the Shepherd Model Gateway's worker contracts "
                                     "(vllm.grpc.engine.VllmEngine, mlx.grpc.engine.MlxEngine)")
    smg_contract: str = setting("both", "which SMG worker contracts to serve: vllm (the full one), mlx (the narrow "
                                        "one) or both (SMG then uses vllm)", choices=("both", "vllm", "mlx"))
    smg_worker_model: str = setting("", "the model the SMG worker contracts serve, MODEL:ADAPTER for one of its "
                                        "loaded adapters on every request (default: the first generation model, "
                                        "else the first embedding model)", metavar="NAME")
    limits: Limits = Limits()  # the engines' limits (identifiers are checked before a model is found)


def worker_contracts(options: ServerOptions) -> tuple[str, ...]:
    """The full names of the SMG worker services served."""
    if not options.smg_worker:
        return ()
    return {"both": (VLLM_SERVICE_NAME, WORKER_SERVICE_NAME), "vllm": (VLLM_SERVICE_NAME,),
            "mlx": (WORKER_SERVICE_NAME,)}[options.smg_contract]


def exposure(host: str, options: ServerOptions) -> str:
    """Why listening on ``host`` with ``options`` is unsafe ("" when it is not)."""
    if token_table(options) or is_loopback_host(host):
        return ""
    return (f"listening on {host}, beyond this machine, without auth tokens: give --auth-token-file "
            f"(or $MLXGRPC_AUTH_TOKENS), listen on 127.0.0.1, or accept it with --insecure-open")


def token_table(options: ServerOptions) -> TokenTable:
    """Every token the server accepts (the table's win over bare ones)."""
    return TokenTable({**TokenTable.of_tokens(options.auth_tokens).identities, **options.auth_table.identities})


def call_budgets(options: ServerOptions) -> CallBudgets:
    return CallBudgets(options.max_concurrent_rpcs, options.max_anonymous_streams, options.max_streams_per_tenant,
                       token_table(options).tenants())


async def create_server(address: str, models: ModelSet, *, options: ServerOptions = ServerOptions(),
                        health_servicer: health.aio.HealthServicer | None = None,
                        credentials: grpc.ServerCredentials | None = None,
                        state: ServerState | None = None, metrics: Metrics | None = None
                        ) -> tuple[grpc.aio.Server, int]:
    """A server with every service added and ``address`` bound (not started); returns it and the port."""
    state = state or ServerState()
    budgets = call_budgets(options)
    if metrics is not None:
        metrics.watch_calls(budgets)
    observers: list[Observer] = [o for o in (metrics, AccessLog() if options.access_log else None) if o is not None]
    interceptors: list[grpc.aio.ServerInterceptor] = [
        ObservingInterceptor(state, observers), *tracing.interceptors(options),
        AuthInterceptor(token_table(options), open_reflection=options.auth_open_reflection,
                        admin_loopback=options.admin_loopback, anonymous_role=options.anonymous_role),
        BudgetInterceptor(budgets), DrainInterceptor(state), WireBudgetInterceptor(options.limits)]
    server = grpc.aio.server(interceptors=interceptors, options=[
        ("grpc.max_receive_message_length", options.max_message_bytes),
        ("grpc.max_send_message_length", options.max_message_bytes), *KEEPALIVE,
        ("grpc.so_reuseport", 0),  # a second server on a taken port fails to bind instead of sharing it
    ])  # no maximum_concurrent_rpcs: grpc's would count anonymous streams too (BudgetInterceptor counts)
    servicer = InferenceServicer(models, options.limits, options.max_message_bytes, budgets=budgets)
    pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    contracts = worker_contracts(options)
    if contracts:  # the worker contracts' model stays loaded (SMG knows a worker by its one model)
        worker_model = options.smg_worker_model.partition(":")[0] or (models.generation[0].name
                                                                       if models.generation else "")
        models.residency.held = frozenset({worker_model} - {""})
    worker_args = (models, state, options.limits, options.max_message_bytes, options.smg_worker_model)
    if VLLM_SERVICE_NAME in contracts:
        vllm_grpc.add_VllmEngineServicer_to_server(VllmWorkerServicer(*worker_args), server)
    if WORKER_SERVICE_NAME in contracts:
        mlx_grpc.add_MlxEngineServicer_to_server(WorkerServicer(*worker_args), server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer or health.aio.HealthServicer(), server)
    if options.reflection:
        names = (SERVICE_NAME, *contracts, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"could not bind {address}")
    return server, port


async def set_health(servicer: health.aio.HealthServicer, serving: bool, *,
                     workers: tuple[str, ...] = (VLLM_SERVICE_NAME, WORKER_SERVICE_NAME)) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME, *workers):
        await servicer.set(name, status)


async def guard_engines(models: ModelSet, health_servicer: health.aio.HealthServicer, stall_timeout_s: float,
                        *, workers: tuple[str, ...] = (VLLM_SERVICE_NAME, WORKER_SERVICE_NAME)) -> dict[str, str]:
    """Returns once a model is broken (its callers ended), health NOT_SERVING."""
    broken = await watch(models, stall_timeout_s)
    await set_health(health_servicer, False, workers=workers)
    return broken


async def drain(server: grpc.aio.Server, state: ServerState, health_servicer: health.aio.HealthServicer,
                grace_s: float, *, metrics: Metrics | None = None,
                force: asyncio.Event | None = None) -> bool:
    """Stops taking RPCs, gives in-flight ones ``grace_s`` (``force`` cuts it short), cuts the rest
    with ``CUT`` and stops the server. True when all finished."""
    state.draining = True
    if metrics is not None:
        metrics.draining.set(1)
    await set_health(health_servicer, False)
    began = time.monotonic()
    log.info("draining: %d RPCs in flight, grace %.1fs", state.in_flight, grace_s)
    idle = asyncio.create_task(state.wait_idle(grace_s))
    waits = {idle} | ({asyncio.create_task(force.wait())} if force is not None else set())
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits - {idle}:
        task.cancel()
    finished = idle.done() and idle.result()
    idle.cancel()
    if finished:
        log.info("drained in %.2fs", time.monotonic() - began)
    else:
        log.warning("grace over after %.2fs: ending %d RPCs with UNAVAILABLE", time.monotonic() - began,
                    await state.cut(CUT))
    await server.stop(FLUSH_S)
    return finished


async def serve(address: str, models: ModelSet, options: ServerOptions = ServerOptions(), *,
                credentials: grpc.ServerCredentials | None = None) -> int:
    """Runs the server until SIGINT/SIGTERM, then drains. Returns 0, 1 (a model failed to load) or
    ``EXIT_ENGINE_BROKEN``; raises ValueError for a non-loopback address without tokens."""

    options = tracing.configured(options)  # the OTLP exporter's provider when tracing is on
    problem = exposure(address.rpartition(":")[0], options)
    if problem and not options.insecure_open:
        raise ValueError(problem)
    if problem:
        log.warning("INSECURE (--insecure-open): listening on %s without auth tokens; anyone who reaches "
                    "it may call every inference RPC; production should mount a tokens file "
                    "(--auth-token-file)", address)
    if (options.admin_loopback or options.anonymous_role != "inference") and token_table(options):
        log.warning("--admin-loopback and --anonymous-role have no effect: the server has auth tokens, whose "
                    "roles decide")
    elif options.admin_loopback:
        log.warning("--admin-loopback: every caller on this machine holds the admin role, and so does every "
                    "caller a same-host proxy or sidecar forwards; give tokens with roles instead")
    health_servicer = health.aio.HealthServicer()
    state = ServerState()
    tenants = sorted(token_table(options).tenants())
    metrics = Metrics(models, tenants=tenants) if options.metrics_port is not None else None
    server, port = await create_server(address, models, options=options, health_servicer=health_servicer,
                                       credentials=credentials, state=state, metrics=metrics)
    await set_health(health_servicer, False, workers=worker_contracts(options))
    await server.start()
    log.info("listening on port %d%s; loading %s", port, " (TLS)" if credentials else "",
             ", ".join(models.names()))
    if metrics is not None and options.metrics_port is not None:
        log.info("metrics on http://%s:%d/metrics", options.metrics_host,
                 metrics.serve_http(options.metrics_port, options.metrics_host))
    stop, force = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (force if stop.is_set() else stop).set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    loading = asyncio.create_task(models.start())
    status, grace_s = 0, options.grace_s
    done, _ = await asyncio.wait({loading, asyncio.create_task(stop.wait())},
                                 return_when=asyncio.FIRST_COMPLETED)
    if loading in done and loading.exception() is None:
        await set_health(health_servicer, True, workers=worker_contracts(options))
        log.info("ready: serving %s on port %d", ", ".join(models.names()), port)
        guard = asyncio.create_task(guard_engines(models, health_servicer, options.engine_stall_timeout_s,
                                                  workers=worker_contracts(options)))
        await asyncio.wait({guard, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if guard.done():
            status, grace_s = EXIT_ENGINE_BROKEN, min(grace_s, BROKEN_GRACE_S)
        guard.cancel()
    elif loading in done:
        log.error("a model failed to load: %s", loading.exception())
        status = 1
    await drain(server, state, health_servicer, grace_s, metrics=metrics, force=force)
    loading.cancel()
    await models.close()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    if metrics is not None:
        metrics.close()
    tracing.shutdown(options)  # the last spans leave
    log.info("stopped")
    return status
