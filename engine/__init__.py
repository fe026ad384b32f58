"""The MLX inference engine (never imports grpc).

Importing the package first loads an optimized BLAS for MLX's CPU backend when one
is installed (``engine.hardware.blas``; ``MLX_GRPC_BLAS=off`` turns it off). This has to run
before anything imports ``mlx``, so keep it the first statement here.
"""

from .hardware import blas as _blas

_blas.preload()
