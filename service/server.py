"""The grpc.aio server: InferenceService, health and reflection, graceful drain.

``create_server`` builds a server bound to ``address`` (port 0 picks a free port)
and returns it with the port, so tests and embedders choose the address. ``serve``
runs one until SIGINT/SIGTERM: health is NOT_SERVING while models load, SERVING
when every model is ready, and NOT_SERVING again while it drains.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engine.models import ModelSet

from .gen.mlxgrpc.v1 import inference_service_pb2 as pb
from .gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from .servicer import InferenceServicer

log = logging.getLogger("service.server")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["InferenceService"].full_name


@dataclass(frozen=True)
class ServerOptions:
    reflection: bool = True
    max_message_bytes: int = 16 * 1024 * 1024
    grace_s: float = 10.0


async def create_server(address: str, models: ModelSet, *, options: ServerOptions = ServerOptions(),
                        health_servicer: health.aio.HealthServicer | None = None
                        ) -> tuple[grpc.aio.Server, int]:
    """A server with every service added and ``address`` bound (not started)."""
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", options.max_message_bytes),
        ("grpc.max_send_message_length", options.max_message_bytes),
    ])
    pb_grpc.add_InferenceServiceServicer_to_server(InferenceServicer(models), server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer or health.aio.HealthServicer(), server)
    if options.reflection:
        names = (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"could not bind {address}")
    return server, port


async def set_health(servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        await servicer.set(name, status)


async def serve(address: str, models: ModelSet, options: ServerOptions = ServerOptions()) -> None:
    """Runs the server until SIGINT/SIGTERM, then drains gracefully."""
    health_servicer = health.aio.HealthServicer()
    server, port = await create_server(address, models, options=options, health_servicer=health_servicer)
    await set_health(health_servicer, False)
    await server.start()
    log.info("listening on port %d; loading %s", port, ", ".join(models.names()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loading = asyncio.create_task(models.start())
    done, _ = await asyncio.wait({loading, asyncio.create_task(stop.wait())},
                                 return_when=asyncio.FIRST_COMPLETED)
    if loading in done and loading.exception() is None:
        await set_health(health_servicer, True)
        log.info("ready: serving %s on port %d", ", ".join(models.names()), port)
        await stop.wait()
    elif loading in done:
        log.error("a model failed to load: %s", loading.exception())
    log.info("draining (grace %.0fs)", options.grace_s)
    await set_health(health_servicer, False)
    await server.stop(options.grace_s)
    loading.cancel()
    await models.close()
    log.info("stopped")
