"""SMG's MLX worker contract (``mlx.grpc.engine.MlxEngine``), served beside our own API.

The Shepherd Model Gateway routes OpenAI HTTP traffic to MLX workers over this
contract; its stubs come from the pinned ``smg-grpc-proto`` package. The servicer
is backed by the same engines as InferenceService (one admission queue, one prefix
cache, one cancel path) and passes the same interceptors (auth, drain, metrics,
access log); errors map through ``service.status`` like every other RPC.
"""
