"""Reading an adapter directory as ``mlx_lm.lora`` writes it, checked before it loads.

Invariants: every limit (files, config size, rank, header, bytes, room) is checked before
tensor data is read; no message repeats a server path or an OS error's file name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import DoesNotFit, InvalidRequest, echo
from . import safetensors
from .paths import CONFIG, WEIGHTS, Place, anywhere

KINDS = ("lora", "dora")
MAX_CONFIG_BYTES = 64 << 10


@dataclass(frozen=True)
class AdapterLimits:
    max_rank: int = 256
    max_bytes: int = 1 << 30  # tensor bytes in adapters.safetensors


@dataclass(frozen=True)
class AdapterSource:
    path: Path  # the directory as clients are shown it (``Place.shown``)
    fine_tune_type: str  # "lora" or "dora"
    num_layers: int  # the last num_layers blocks carry adapters (<= 0: all of them)
    rank: int
    scale: float
    keys: tuple[str, ...] | None  # module names inside a block; None: every linear layer
    tensors: dict[str, Any]  # name -> mx.array
    digest: str = ""  # SHA-256 of the config and the tensors as read: the adapter's identity across loads

    @property
    def dora(self) -> bool:
        return self.fine_tune_type == "dora"


@dataclass(frozen=True)
class AdapterFiles:
    """An adapter checked and read into memory; no MLX array yet."""

    shown: str
    settings: tuple[str, int, int, float, tuple[str, ...] | None]  # kind, num_layers, rank, scale, keys
    tensors: dict[str, safetensors.Tensor]
    data: bytearray
    digest: str = ""

    def source(self) -> AdapterSource:
        """The adapter's arrays (engine thread)."""
        return AdapterSource(Path(self.shown), *self.settings, safetensors.arrays(self.tensors, self.data),
                             self.digest)


def read_adapter(path: str | Path, field: str = "path", limits: AdapterLimits = AdapterLimits()) -> AdapterSource:
    """The adapter at ``path`` (anywhere), read and built at once."""
    return read_files(anywhere(str(path), None, field), limits, None, field).source()


def read_files(place: Place, limits: AdapterLimits, room: int | None, field: str) -> AdapterFiles:
    """The checked adapter at ``place`` (blocking); ``room``: the model's fixed bytes free (None: unchecked)."""
    with _open(place, place.config, CONFIG, field) as (f, size):
        if size > MAX_CONFIG_BYTES:
            raise InvalidRequest(field, f"{CONFIG} is {size} bytes, over the limit of {MAX_CONFIG_BYTES}")
        raw = _read(f, 0, size, CONFIG, field)
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidRequest(field, f"cannot read {CONFIG}: {str(exc)[:120]}") from None
    settings = _settings(config, field)
    rank = settings[2]
    if rank > limits.max_rank:
        raise InvalidRequest(field, f"lora_parameters.rank {rank} exceeds the server's limit of {limits.max_rank}")
    with _open(place, place.weights, WEIGHTS, field) as (f, size):
        try:
            n = safetensors.header_length(_read(f, 0, min(size, safetensors.PREFIX), WEIGHTS, field), size)
            data_size = size - safetensors.PREFIX - n
            tensors = safetensors.parse_header(_read(f, safetensors.PREFIX, n, WEIGHTS, field), data_size)
        except safetensors.BadFile as exc:
            raise InvalidRequest(field, f"cannot read {WEIGHTS}: it {exc}") from None
        _check_ranks(tensors, rank, field)
        if data_size > limits.max_bytes:
            raise InvalidRequest(field, f"{WEIGHTS} holds {data_size} bytes of tensors, over the server's limit "
                                        f"of {limits.max_bytes}")
        least = sum(t.elements for t in tensors.values()) * safetensors.SMALLEST_ITEM
        if room is not None and least > room:
            raise DoesNotFit(f"an adapter of at least {least} bytes can never fit beside the model's weights "
                             f"({room} bytes of room)",
                             metadata={"adapter_bytes": str(least), "room_bytes": str(room)})
        data = bytearray(data_size)
        _fill(f, safetensors.PREFIX + n, memoryview(data), WEIGHTS, field)
    digest = hashlib.sha256(raw)
    digest.update(json.dumps({k: (t.dtype, t.shape, t.begin) for k, t in sorted(tensors.items())}).encode())
    digest.update(data)
    return AdapterFiles(place.shown, settings, tensors, data, digest.hexdigest())


def _check_ranks(tensors: dict[str, safetensors.Tensor], rank: int, field: str) -> None:
    for name, t in tensors.items():
        side = 1 if name.endswith(".lora_a") else 0 if name.endswith(".lora_b") else None
        if side is not None and (len(t.shape) != 2 or t.shape[side] != rank):
            raise InvalidRequest(field, f"lora_parameters.rank is {rank} but tensor {name[:80]!r} of "
                                        f"{WEIGHTS} has shape {t.shape}")


class _open:
    """A regular file opened without following a last symlink or blocking on a FIFO."""

    def __init__(self, place: Place, path: Path, label: str, field: str):
        self.place, self.path, self.label, self.field = place, path, label, field

    def __enter__(self) -> tuple[io.FileIO, int]:
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise InvalidRequest(self.field, f"{echo(self.place.given)} is not an adapter directory "
                                             f"(it needs {CONFIG} and {WEIGHTS})") from None
        except OSError as exc:
            raise InvalidRequest(self.field, f"cannot open {self.label}: {exc.strerror}") from None
        self.file = os.fdopen(fd, "rb", buffering=0)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            self.file.close()
            raise InvalidRequest(self.field, f"{self.label} is not a regular file")
        return self.file, info.st_size

    def __exit__(self, *exc) -> None:
        self.file.close()


def _read(f: io.FileIO, offset: int, n: int, label: str, field: str) -> bytes:
    buf = bytearray(n)
    _fill(f, offset, memoryview(buf), label, field)
    return bytes(buf)


def _fill(f: io.FileIO, offset: int, view: memoryview, label: str, field: str) -> None:
    try:
        f.seek(offset)
        got = 0
        while got < len(view):
            n = _readinto(f, view[got:])
            if not n:
                raise InvalidRequest(field, f"cannot read {label}: it ends early (changed while being read?)")
            got += n
    except OSError as exc:
        raise InvalidRequest(field, f"cannot read {label}: {exc.strerror or 'read failed'}") from None


def _readinto(f: io.FileIO, view: memoryview) -> int:
    return f.readinto(view)


def _settings(config: Any, field: str) -> tuple[str, int, int, float, tuple[str, ...] | None]:
    if not isinstance(config, dict):
        raise InvalidRequest(field, f"{CONFIG} must hold a JSON object")
    kind = config.get("fine_tune_type", "lora")
    if kind not in KINDS:
        raise InvalidRequest(field, f"fine_tune_type {str(kind)[:32]!r} is not an adapter "
                                    f"(expected one of {', '.join(KINDS)})")
    params = config.get("lora_parameters")
    if not isinstance(params, dict):
        raise InvalidRequest(field, f"{CONFIG} has no lora_parameters object")
    rank, scale, keys = params.get("rank"), params.get("scale"), params.get("keys")
    num_layers = config.get("num_layers", 0)
    if not _is_int(rank) or rank < 1:
        raise InvalidRequest(field, f"lora_parameters.rank must be a positive integer, not {str(rank)[:32]!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale != scale:
        hint = " (mlx-lm names it 'scale', not 'alpha')" if "alpha" in params else ""
        raise InvalidRequest(field, f"lora_parameters.scale must be a number, not {str(scale)[:32]!r}{hint}")
    if not _is_int(num_layers):
        raise InvalidRequest(field, f"num_layers must be an integer, not {str(num_layers)[:32]!r}")
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise InvalidRequest(field, "lora_parameters.keys must be a list of module names")
    return kind, int(num_layers), int(rank), float(scale), tuple(keys) if keys is not None else None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
