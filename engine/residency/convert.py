"""A GGUF file's one-time conversion in a child process at lower CPU priority, so that a load
never competes with the serving engine threads for the interpreter or the cores.

Run as ``python -m engine.residency.convert FILE``: it prints ``progress STAGE FRACTION``
lines and converts into the same cache directory the loader then finds up to date.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import AsyncIterator

NICENESS = 19


def converted(gguf: Path) -> bool:
    """Whether the file's conversion is already in the cache (hashes the file once)."""
    from ..loading.gguf import gguf_fingerprint, is_up_to_date
    from ..loading.model import cache_root

    root = cache_root()
    return is_up_to_date(root / f"{gguf.stem}-{gguf_fingerprint(gguf, root)}", gguf_fingerprint(gguf, root))


async def convert_in_child(gguf: Path) -> AsyncIterator[float]:
    """Yields the conversion's fraction done; RuntimeError with the child's last words if it fails."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engine.residency.convert", str(gguf),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=lambda: os.nice(NICENESS))
    try:
        assert process.stdout is not None and process.stderr is not None
        async for line in process.stdout:
            words = line.decode(errors="replace").split()
            if len(words) == 3 and words[0] == "progress":
                yield float(words[2])
        errors = (await process.stderr.read()).decode(errors="replace").strip().splitlines()
        if await process.wait() != 0:
            raise RuntimeError(f"the GGUF conversion failed: {errors[-1] if errors else 'no message'}")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def main() -> None:
    from ..loading.gguf import prepare_gguf
    from ..loading.model import cache_root

    def report(stage: str, fraction: float) -> None:
        print(f"progress {stage.replace(' ', '_') or '-'} {fraction:.4f}", flush=True)

    prepare_gguf(Path(sys.argv[1]), cache_root(), progress=report)


if __name__ == "__main__":
    main()
