"""The tokenizer as the worker contract ships it: one zip, streamed in chunks.

Invariant: the zip is deterministic, so replicas send identical bytes and sha256 (last chunk only).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from typing import Iterator, Mapping

from smg_grpc_proto.generated import common_pb2

CHUNK_BYTES = 64 * 1024
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


@dataclass(frozen=True)
class TokenizerBundle:
    data: bytes
    sha256: str

    @classmethod
    def of(cls, files: Mapping[str, bytes]) -> "TokenizerBundle":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(files):
                entry = zipfile.ZipInfo(name, date_time=_EPOCH)
                entry.external_attr = 0o644 << 16
                archive.writestr(entry, files[name], compress_type=zipfile.ZIP_DEFLATED)
        data = buffer.getvalue()
        return cls(data, hashlib.sha256(data).hexdigest())

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[common_pb2.GetTokenizerChunk]:
        for start in range(0, len(self.data), size):
            last = start + size >= len(self.data)
            yield common_pb2.GetTokenizerChunk(data=self.data[start:start + size],
                                               sha256=self.sha256 if last else "")
