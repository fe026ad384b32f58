"""Benchmarks of mlx-grpc against mlx-lm (in-process) and ``mlx_lm.server`` (HTTP).

``python -m bench`` (or ``python bench/run.py``); ``--help`` lists the options and
docs/PERFORMANCE.md has the latest table. Not a test: nothing here asserts.
"""

import engine  # noqa: F401  - loads the optimized BLAS before anything imports mlx
