"""The MLX inference engine (never imports grpc).

Invariant: the BLAS preload must run before anything imports ``mlx``: keep it the first statement.
"""

from .hardware import allocator as _allocator
from .hardware import blas as _blas

_blas.preload()
_allocator.retain_freed_memory()
