"""SMG's MLX worker contract (``mlx.grpc.engine.MlxEngine``), served beside our own API.

Invariant: backed by the same engines and interceptors as InferenceService.
"""
