"""One prefix-cache entry as one safetensors file: the caches' exact state, their classes,
its namespace tag and tokens, and two HMAC-SHA-256s under the tier's key (disk_key): one
of the tensor data, one of the header (which holds the first).

Invariants: a file is created 0600 with O_EXCL|O_NOFOLLOW under a temporary name, fsynced
and renamed, so a file under its final name is complete; ``read_meta`` returns a header
only when it parses and its MAC holds, ``read_entry`` a file's contents only when its
spans tile the data and both MACs hold (``BadEntry`` otherwise: damaged, tampered or
written under another key); files are opened with O_NOFOLLOW|O_NONBLOCK and read only
when regular (``Foreign`` otherwise). Pure numpy: any thread may write or read
(``to_host``/``from_host`` convert on the engine thread).
"""

from __future__ import annotations

import hmac
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .disk_files import create_private, open_regular
from .disk_key import keyed

FORMAT = "mlx-grpc-prefix/2"
SUFFIX = ".safetensors"
TEMP_SUFFIX = ".tmp"
_PREFIX = 8
_MAX_HEADER = 16 << 20
_ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "uint32": "U32", "int32": "I32",
              "uint8": "U8", "int8": "I8", "uint16": "U16"}
_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32,
       "U8": np.uint8, "I8": np.int8, "U16": np.uint16}


class BadEntry(ValueError):
    """The file is not a complete, intact entry of this format (the message says why)."""


@dataclass
class HostEntry:
    """An entry in host memory: what the file holds."""

    namespace: str  # on disk and once read: the namespace's keyed tag (disk_key.namespace_tag)
    tokens: list[int]
    fingerprint: str
    classes: list[str]  # one cache class name per layer
    leaves: list[list[list[Any]]]  # per cache: [path, kind, value]; kind "array" values index ``tensors``
    tensors: list[tuple[str, tuple[int, ...], Any]]  # (safetensors dtype, shape, buffer)

    @property
    def nbytes(self) -> int:
        return sum(memoryview(buf).nbytes for _, _, buf in self.tensors)


def header(entry: HostEntry, key: bytes) -> tuple[bytes, list[Any]]:
    """The encoded header (prefix included) and the buffers to write after it, in order."""
    spans, at, buffers = {}, 0, []
    for i, (dtype, shape, buf) in enumerate(entry.tensors):
        n = memoryview(buf).nbytes
        spans[f"t{i}"] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
        buffers.append(buf)
    data_mac = keyed(key, b"data")
    for buf in buffers:
        data_mac.update(buf)
    meta = {"format": FORMAT, "namespace": entry.namespace, "tokens": json.dumps(entry.tokens),
            "fingerprint": entry.fingerprint, "classes": json.dumps(entry.classes),
            "leaves": json.dumps(entry.leaves), "data_mac": data_mac.hexdigest()}
    meta["head_mac"] = _head_mac(key, meta, spans)
    raw = json.dumps({"__metadata__": meta, **spans}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(_PREFIX, "little") + raw, buffers


def _head_mac(key: bytes, meta: dict[str, Any], spans: dict[str, Any]) -> str:
    """The MAC of everything in the header but itself (canonical JSON: key order does not matter)."""
    signed = {"__metadata__": {k: v for k, v in meta.items() if k != "head_mac"}, **spans}
    return keyed(key, b"head", json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_entry(path: Path, entry: HostEntry, key: bytes) -> int:
    """Writes ``entry`` at ``path`` atomically (temp + fsync + rename + directory fsync); returns its bytes."""
    head, buffers = header(entry, key)
    temp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")  # one writer each
    try:
        with open(create_private(temp), "wb") as f:
            f.write(head)
            for buf in buffers:
                f.write(buf)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)  # replaces a name: a link planted there is never followed
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(head) + sum(memoryview(b).nbytes for b in buffers)


def read_meta(path: Path, key: bytes) -> tuple[dict[str, str], int]:
    """The header's metadata (its MAC checked) and the file's size, reading only the header."""
    with open(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        meta, _, _ = _header(f, size, key)
    return meta, size


def read_entry(path: Path, key: bytes) -> HostEntry:
    with open(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        meta, spans, start = _header(f, size, key)
        data = bytearray(size - start)
        if f.readinto(data) != len(data):
            raise BadEntry("is shorter than its header says")
    if not _same(_data_mac(key, data), meta.get("data_mac")):
        raise BadEntry("fails its MAC (damaged, tampered with, or written under another key)")
    try:
        tensors = []
        for i in range(len(spans)):
            span = spans[f"t{i}"]
            dtype, shape, (begin, end) = span["dtype"], tuple(span["shape"]), span["data_offsets"]
            count = math.prod(shape)
            values = np.frombuffer(data, dtype=_NP[dtype], count=count, offset=begin).reshape(shape)
            if values.nbytes != end - begin:
                raise BadEntry("has a tensor whose span does not match its shape")
            tensors.append((dtype, shape, values))
        return HostEntry(meta["namespace"], json.loads(meta["tokens"]), meta["fingerprint"],
                         json.loads(meta["classes"]), json.loads(meta["leaves"]), tensors)
    except (KeyError, ValueError, TypeError) as exc:
        raise BadEntry(f"has a malformed header ({exc})") from None


def _same(mac: str, stored: object) -> bool:
    return hmac.compare_digest(mac.encode(), str(stored).encode())


def _data_mac(key: bytes, data: bytearray) -> str:
    mac = keyed(key, b"data")
    mac.update(data)
    return mac.hexdigest()


def _header(f, size: int, key: bytes) -> tuple[dict[str, str], dict[str, Any], int]:
    prefix = f.read(_PREFIX)
    if len(prefix) < _PREFIX:
        raise BadEntry("is shorter than a safetensors header")
    n = int.from_bytes(prefix, "little")
    if n > _MAX_HEADER or _PREFIX + n > size:
        raise BadEntry(f"declares a header of {n} bytes in a file of {size}")
    try:
        parsed = json.loads(f.read(n))
        meta = parsed.pop("__metadata__")
    except (ValueError, KeyError, AttributeError, TypeError, UnicodeDecodeError) as exc:
        raise BadEntry(f"has a header that is not valid ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BadEntry("is not a prefix-cache entry of this format")
    if not _same(_head_mac(key, meta, parsed), meta.get("head_mac")):
        raise BadEntry("fails its header MAC (tampered with, or written under another key)")
    data = size - _PREFIX - n
    at = 0
    for i in range(len(parsed)):
        span = parsed.get(f"t{i}")
        if not isinstance(span, dict) or span.get("data_offsets", [None])[0] != at or span.get("dtype") not in _NP:
            raise BadEntry("has tensor spans that do not tile its data")
        at = span["data_offsets"][1]
    if at != data:
        raise BadEntry(f"declares {at} bytes of tensor data but holds {data}")
    return meta, parsed, _PREFIX + n


def to_host(caches: list[Any], namespace: str, tokens: list[int], fingerprint: str) -> HostEntry:
    """Engine thread: the caches' state as host buffers (evaluated arrays are read, not copied)."""
    import mlx.core as mx

    from ..mlx_typed import flatten

    classes, leaves, lazy = [], [], []
    tensors: list[tuple[str, tuple[int, ...], mx.array]] = []
    for cache in caches:
        classes.append(type(cache).__name__)
        mine = []
        for path, leaf in flatten(cache.state):
            if isinstance(leaf, mx.array):
                stored = leaf.view(mx.uint16) if leaf.dtype == mx.bfloat16 else leaf
                lazy.append(stored)
                mine.append([path, "array", len(tensors)])
                tensors.append((_ST_DTYPES[str(leaf.dtype).split(".")[-1]], tuple(leaf.shape), stored))
            elif leaf is None or isinstance(leaf, (bool, int, float, str)):
                mine.append([path, "value", leaf])
            else:
                raise TypeError(f"{type(cache).__name__} holds state of type {type(leaf).__name__}")
        leaves.append(mine)
    mx.eval(lazy)
    host = []
    for dtype, shape, stored in tensors:
        view = memoryview(stored)  # type: ignore[arg-type]  # buffer protocol, no copy (missing from mlx.core stub)
        host.append((dtype, shape, view if view.c_contiguous else np.ascontiguousarray(view)))
    return HostEntry(namespace, list(tokens), fingerprint, classes, leaves, host)


def from_host(entry: HostEntry) -> list[Any]:
    """Engine thread: the caches again (mlx-lm's classes rebuilt from their state)."""
    import mlx.core as mx
    from mlx.utils import tree_unflatten
    from mlx_lm.models import cache as cache_module

    from . import quantized_kv

    caches = []
    for name, leaves in zip(entry.classes, entry.leaves):
        cls = getattr(quantized_kv, name, None) or getattr(cache_module, name, None)
        if not isinstance(cls, type) or not hasattr(cls, "from_state"):
            raise BadEntry(f"names an unknown cache class {name!r}")
        flat = []
        for path, kind, value in leaves:
            if kind == "array":
                dtype, _, values = entry.tensors[value]
                array = mx.array(values)
                flat.append((path, array.view(mx.bfloat16) if dtype == "BF16" else array))
            else:
                flat.append((path, value))
        state = tree_unflatten(flat) if flat else []
        caches.append(cls.from_state(state))
    mx.eval([leaf for c in caches for leaf in _arrays(c)])
    return caches


def _arrays(cache: Any) -> list[Any]:
    import mlx.core as mx

    from ..mlx_typed import flatten

    return [leaf for _, leaf in flatten(cache.state) if isinstance(leaf, mx.array)]


def writer_alive(temp_name: str) -> bool:
    """Whether the process that names a temporary file (``<key>.<pid>.<thread>.tmp``) still runs."""
    parts = temp_name.split(".")
    try:
        pid = int(parts[-3])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return False  # this process starts now: none of its writes is in flight
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
