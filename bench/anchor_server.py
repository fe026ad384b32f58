"""``mlx_lm.server`` with the same BLAS as ours: ``python -m bench.anchor_server ARGS``.

mlx_lm.server imports mlx directly, so it would run on MLX's reference BLAS;
importing ``engine`` first preloads the optimized one (see engine/blas.py).
"""

import sys

import engine  # noqa: F401  - must precede every mlx import
from engine.hardware import blas


def main() -> None:
    print(f"anchor BLAS: {blas.describe()}", file=sys.stderr, flush=True)
    from mlx_lm.server import main as server_main

    sys.argv = ["mlx_lm.server", *sys.argv[1:]]
    server_main()


if __name__ == "__main__":
    main()
