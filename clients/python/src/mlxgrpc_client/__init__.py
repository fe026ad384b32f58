"""Python client for the mlx-grpc InferenceService (mlxgrpc.v1).

Blocking::

    from mlxgrpc_client import connect, error_details, pb

    with connect("localhost:50051", timeout=60) as client:
        print(client.model_info().name)
        for event in client.generate("Once upon a time", max_tokens=16):
            if event.HasField("delta"):
                print(event.delta.text, end="", flush=True)

asyncio: ``from mlxgrpc_client import aio`` and ``aio.connect(...)`` (same methods,
awaited; ``async for`` over ``generate`` and ``transcribe_stream``). Messages and enums
live in :mod:`mlxgrpc_client.pb`; the generated modules in :mod:`mlxgrpc_client.gen`.
"""

from . import aio, pb
from ._common import (Choice, ErrorDetails, GenerationResult, classify_request, embed_request, error_details,
                      generate_request, load_model_request, prefetch_request, rerank_request)
from ._embeddings import Embeddings, decode_packed, dequantize, hamming, unpack_bits
from ._images import image_part, sniff_media_type
from ._sparse import SparseEmbeddings, SparseVector, embed_sparse_request
from ._speech import Segment, Transcript, audio, audio_part, sniff_audio_media_type, transcribe_request
from ._sync import Client, GenerateStream, TranscribeStream, connect
from ._videos import sniff_video_media_type, video_part

__all__ = [
    "Choice",
    "Client",
    "Embeddings",
    "ErrorDetails",
    "GenerateStream",
    "GenerationResult",
    "Segment",
    "SparseEmbeddings",
    "SparseVector",
    "TranscribeStream",
    "Transcript",
    "aio",
    "audio",
    "audio_part",
    "classify_request",
    "connect",
    "decode_packed",
    "dequantize",
    "embed_request",
    "embed_sparse_request",
    "error_details",
    "generate_request",
    "hamming",
    "image_part",
    "load_model_request",
    "pb",
    "prefetch_request",
    "rerank_request",
    "sniff_audio_media_type",
    "sniff_media_type",
    "sniff_video_media_type",
    "transcribe_request",
    "unpack_bits",
    "video_part",
]
