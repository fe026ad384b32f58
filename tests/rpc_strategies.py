"""Hypothesis strategies for random messages of every RPC the server exposes, built from the
protos' descriptors (mlxgrpc.v1.InferenceService, vllm.grpc.engine.VllmEngine,
mlx.grpc.engine.MlxEngine); shared by tests/test_tenant_fuzz.py and bench/fuzz.py.

Invariants: a message strategy sets at most one field of each oneof, nests messages at most
``Sizes.depth`` deep, and builds large values by repetition (``Sizes.huge``) so hypothesis
draws stay small; field-name hints (model names, token ids in the vocabulary, small
``max_tokens``, shared request and session ids, deep JSON) are mixed with the generic values
so that a share of the calls get past validation. The strategies never hold another tenant's
secrets: whatever they send, the sender knows.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from google.protobuf import descriptor as _d
from google.protobuf import message_factory
from hypothesis import strategies as st
from smg_grpc_proto import mlx_engine_pb2, vllm_engine_pb2

from service.gen.mlxgrpc.v1 import inference_service_pb2

F = _d.FieldDescriptor
SERVICES = ((inference_service_pb2, "InferenceService"), (vllm_engine_pb2, "VllmEngine"), (mlx_engine_pb2, "MlxEngine"))
SHARED_REQUEST_IDS = ("r1", "r2", "0", "1", "req", "shared")  # ids another tenant may use too
SHARED_SESSION_IDS = ("s1", "s2", "session", "shared")


@dataclass(frozen=True)
class Rpc:
    """One method: its path, request and response classes, whether it streams its answer."""

    path: str
    request: type
    response: type
    streaming: bool

    @property
    def name(self) -> str:
        service, _, method = self.path[1:].partition("/")
        return f"{service.rsplit('.', 1)[-1]}/{method}"


def rpcs() -> list[Rpc]:
    """Every method of the three services, from their descriptors."""
    out = []
    for module, service in SERVICES:
        for method in module.DESCRIPTOR.services_by_name[service].methods:
            assert not method.client_streaming, method.full_name  # none takes a request stream
            out.append(Rpc(f"/{method.containing_service.full_name}/{method.name}",
                           message_factory.GetMessageClass(method.input_type),
                           message_factory.GetMessageClass(method.output_type), method.server_streaming))
    return out


@dataclass(frozen=True)
class Sizes:
    """How large drawn values get: elements of a repeated field or map (``repeat``), nesting
    (``depth``), and the lengths a repeated piece or element reaches (``huge``)."""

    repeat: int = 4
    depth: int = 4
    huge: tuple[int, ...] = (300, 5_000, 60_000)


# --- scalars ------------------------------------------------------------------------------

def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (0, 1, -1, 2, 7, 8, 16, 600, 639, 640, 4095, 4096, 65535, 2**31 - 1, -(2**31),
                                2**31, 2**32 - 1, 2**63 - 1, -(2**63), 2**64 - 1, lo, hi) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi), st.integers(-3, 40).filter(lambda v: lo <= v <= hi))


_INT_RANGES = {
    F.CPPTYPE_INT32: (-(2**31), 2**31 - 1), F.CPPTYPE_UINT32: (0, 2**32 - 1),
    F.CPPTYPE_INT64: (-(2**63), 2**63 - 1), F.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 100.0, -100.0, math.nan, math.inf, -math.inf, 1e-45, 3.4e38, -3.4e38]


def _floats(width: int) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(_FLOAT_EDGES), st.floats(width=width), st.floats(-3, 3, width=width))


def _repeated(piece: st.SearchStrategy[str], sizes: Sizes) -> st.SearchStrategy[str]:
    return st.builds(lambda p, n: (p or "x") * n, piece, st.sampled_from(sizes.huge))


CANARY_LIKE = ["", " ", "\x00", "\ufffd" * 9, "\u202e\u2066", "A\u0301\u0302\u0303", "😀" * 5, "\U0010ffff",
               "<|im_start|>", "<|im_end|>", "<|endoftext|>", "{{ raise_exception('x') }}", "{% for %}",
               "../../../../etc/passwd", "/etc/passwd", "/proc/self/environ", "/proc/self/maps", "/tmp",
               "~/.cache", "C:\\Windows\\win.ini", "file:///etc/hosts", "%s%n%x", "'; DROP TABLE x;--",
               "\r\n\r\nX-Injected: 1", "null", "NaN", "-1", "llama", "default", "admin", "ops", "router"]


def strings(sizes: Sizes, huge: bool = True) -> st.SearchStrategy[str]:
    small = [st.text(max_size=24), st.sampled_from(CANARY_LIKE)]
    return st.one_of(*small, _repeated(st.text(min_size=1, max_size=6), sizes)) if huge else st.one_of(*small)


def _json_text(sizes: Sizes) -> st.SearchStrategy[str]:
    """JSON-shaped text: valid small documents, deep nesting, broken text."""
    depths = st.sampled_from([100, 2_000, max(sizes.huge)])
    deep = st.one_of(st.builds(lambda n: "[" * n + "]" * n, depths),
                     st.builds(lambda n: '{"a":' * n + "1" + "}" * n, depths))
    return st.one_of(deep, deep, st.sampled_from(['{}', '[]', '{"type": "object"}', '{"type": "string", "pattern": "a+"}',
                                            '{"a": 1}', "{", "]", '"x"', "1e999", '{"$ref": "#"}']),
                     st.text(max_size=16))


# --- field-name hints ---------------------------------------------------------------------

def hints(sizes: Sizes, vocab: int = 640) -> dict[str, st.SearchStrategy]:
    """Field name -> values that often pass validation (mixed with the generic ones)."""
    token = st.integers(0, vocab - 1)
    ids = st.lists(token, min_size=1, max_size=40)
    small = st.integers(0, 12)
    json = _json_text(sizes)
    return {
        "model": st.sampled_from(["", "llama", "embed", "classify", "sparse", "llama:none", "no-such-model"]),
        "request_id": st.sampled_from(SHARED_REQUEST_IDS), "request_ids": st.lists(st.sampled_from(SHARED_REQUEST_IDS),
                                                                                   max_size=3),
        "session_id": st.sampled_from(SHARED_SESSION_IDS),
        "ids": ids, "input_ids": ids, "token_ids": ids, "stop_token_ids": st.lists(token, max_size=3),
        "text": st.one_of(st.text(min_size=1, max_size=40), st.sampled_from(["Hello", "The quick brown fox"])),
        "max_tokens": st.integers(1, 8), "max_new_tokens": st.integers(1, 8), "min_tokens": small,
        "n": st.integers(0, 3), "top_logprobs": small, "top_k": small, "top_n": small, "dimensions": small,
        "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1), "priority": st.integers(-2, 100),
        "json_schema": json, "structural_tag": json, "arguments_json": json, "parameters_json_schema": json,
        "role": st.sampled_from(["user", "assistant", "system", "tool", ""]),
        "path": st.sampled_from(["", ".", "..", "/", "/etc", "/proc/self", "adapters/x", "../../x"]),
        "start_sequence_number": st.sampled_from([0, 0, 1, 2, 5, 2**63, 2**64 - 1]),
        "template_kwargs": st.dictionaries(st.text(max_size=8), json, max_size=3),
        "kv_transfer_params_json": json,
    }


# --- messages -----------------------------------------------------------------------------

def _real_oneofs(desc: _d.Descriptor) -> list[_d.OneofDescriptor]:
    return [o for o in desc.oneofs if not (len(o.fields) == 1 and o.name == "_" + o.fields[0].name)]


def scalar(field: _d.FieldDescriptor, sizes: Sizes, huge: bool = True) -> st.SearchStrategy:
    """Values of one scalar or enum field, edges included (unknown enum numbers too); long
    strings and bytes only where ``huge``."""
    kind = field.cpp_type
    if kind in _INT_RANGES:
        return _ints(*_INT_RANGES[kind])
    if kind == F.CPPTYPE_DOUBLE:
        return _floats(64)
    if kind == F.CPPTYPE_FLOAT:
        return _floats(32)
    if kind == F.CPPTYPE_BOOL:
        return st.booleans()
    if kind == F.CPPTYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.sampled_from([-1, 99, 2**31 - 1, -(2**31)]))
    if kind == F.CPPTYPE_STRING and field.type == F.TYPE_BYTES:
        small = st.one_of(st.binary(max_size=64),
                          st.sampled_from([b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a", b"PK\x03\x04"]))
        long = st.builds(lambda p, n: (p or b"\x00") * n, st.binary(min_size=1, max_size=4), st.sampled_from(sizes.huge))
        return st.one_of(small, long) if huge else small
    if kind == F.CPPTYPE_STRING:
        return strings(sizes, huge)
    raise TypeError(f"no scalar strategy for {field.full_name}")


class MessageStrategies:
    """Builds (and caches) a strategy per message type."""

    def __init__(self, sizes: Sizes = Sizes(), field_hints: dict[str, st.SearchStrategy] | None = None):
        self.sizes = sizes
        self.hints = hints(sizes) if field_hints is None else field_hints
        self._cache: dict[tuple[str, int], st.SearchStrategy] = {}

    def of(self, desc: _d.Descriptor, depth: int = 0) -> st.SearchStrategy:
        key = (desc.full_name, depth)
        if key not in self._cache:
            self._cache[key] = st.deferred(lambda: self._build(desc, depth))
        return self._cache[key]

    def _value(self, field: _d.FieldDescriptor, depth: int, huge: bool = True) -> st.SearchStrategy:
        if field.cpp_type == F.CPPTYPE_MESSAGE:
            return self.of(field.message_type, depth + 1)
        base = scalar(field, self.sizes, huge and depth <= 1)
        hint = self.hints.get(field.name)
        if hint is not None and not field.is_repeated:
            return st.one_of(hint, base)
        return base

    def _field(self, field: _d.FieldDescriptor, depth: int) -> st.SearchStrategy:
        """A setter for ``field`` on a message (None: leave unset)."""
        if field.is_repeated and field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f, value_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            few = st.dictionaries(scalar(key_f, self.sizes, False), self._value(value_f, depth, huge=False),
                                  max_size=self.sizes.repeat)
            many = st.builds(lambda n: {i if key_f.cpp_type != F.CPPTYPE_STRING else str(i): _default(value_f)
                                        for i in range(n)}, st.sampled_from(self.sizes.huge))
            options = [few, few, many] + ([self.hints[field.name]] * 2 if field.name in self.hints else [])
            return st.builds(lambda v: (lambda m: _set_map(m, field, value_f, v)), st.one_of(options))
        if field.is_repeated:
            element = self._value(field, depth, huge=False)
            hint = self.hints.get(field.name)
            few = st.lists(element, max_size=self.sizes.repeat)
            # many elements: each small (scalars) or empty (messages), so the size stays bounded
            single = st.just(_default(field)) if field.cpp_type == F.CPPTYPE_MESSAGE else element
            many = st.builds(lambda e, n: [e] * n, single, st.sampled_from(self.sizes.huge))
            options = [few, few, many] + ([hint] * 2 if hint is not None else [])
            return st.builds(lambda v: (lambda m: _extend(m, field, v)), st.one_of(options))
        return st.builds(lambda v: (lambda m: _set(m, field, v)), self._value(field, depth))

    def on_top_of(self, base) -> st.SearchStrategy:
        """``base`` with one field drawn: a top-level one, or one inside a message field ``base``
        sets (a oneof member replaces its siblings)."""
        targets = [((), f) for f in base.DESCRIPTOR.fields]
        for fd, value in base.ListFields():
            if fd.cpp_type == F.CPPTYPE_MESSAGE and not fd.is_repeated:
                targets += [((fd.name,), f) for f in value.DESCRIPTOR.fields]

        def apply(where: tuple[str, ...], setter):
            msg = type(base)()
            msg.CopyFrom(base)
            inner = msg
            for name in where:
                inner = getattr(inner, name)
            setter(inner)
            return msg

        return st.sampled_from(targets).flatmap(
            lambda t: self._field(t[1], len(t[0])).map(lambda setter: apply(t[0], setter)))

    def _build(self, desc: _d.Descriptor, depth: int) -> st.SearchStrategy:
        cls = message_factory.GetMessageClass(desc)
        if depth >= self.sizes.depth:
            return st.just(cls())
        in_oneof = {f.name for o in _real_oneofs(desc) for f in o.fields}
        plain = [f for f in desc.fields if f.name not in in_oneof]
        parts = [st.one_of(st.none(), self._field(f, depth)) for f in plain]
        parts += [st.one_of(st.none(), *[self._field(f, depth) for f in o.fields]) for o in _real_oneofs(desc)]

        def assemble(setters) -> object:
            msg = cls()
            for setter in setters:
                if setter is not None:
                    setter(msg)
            return msg

        return st.builds(assemble, st.tuples(*parts)) if parts else st.just(cls())


def _default(field: _d.FieldDescriptor) -> object:
    if field.cpp_type == F.CPPTYPE_MESSAGE:
        return message_factory.GetMessageClass(field.message_type)()
    return field.default_value if field.cpp_type != F.CPPTYPE_ENUM else 0


def _set(msg, field: _d.FieldDescriptor, value) -> None:
    if field.cpp_type == F.CPPTYPE_MESSAGE:
        getattr(msg, field.name).CopyFrom(value)
    else:
        setattr(msg, field.name, value)


def _extend(msg, field: _d.FieldDescriptor, values) -> None:
    target = getattr(msg, field.name)
    if field.cpp_type == F.CPPTYPE_MESSAGE:
        for value in values:
            target.add().CopyFrom(value)
    else:
        target.extend(values)


def _set_map(msg, field: _d.FieldDescriptor, value_f: _d.FieldDescriptor, items: dict) -> None:
    target = getattr(msg, field.name)
    for key, value in items.items():
        if value_f.cpp_type == F.CPPTYPE_MESSAGE:
            target[key].CopyFrom(value)
        else:
            target[key] = value


# --- raw payloads -------------------------------------------------------------------------

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@st.composite
def tampered(draw, encoded: bytes) -> bytes:
    """``encoded`` with unknown or mistyped fields appended, cut short, or replaced by noise."""
    how = draw(st.sampled_from(["unknown", "truncated", "noise", "nested-length"]))
    if how == "noise":
        return draw(st.binary(max_size=256))
    if how == "truncated":
        return encoded[:draw(st.integers(0, max(len(encoded) - 1, 0)))] if encoded else b"\x0a\x7f"
    if how == "nested-length":  # a length-delimited field claiming more bytes than follow
        return encoded + varint((draw(st.integers(1, 40)) << 3) | 2) + varint(2**31) + b"ab"
    extra = b""
    for number, value in draw(st.lists(st.tuples(st.integers(1, 2**29 - 1), st.integers(0, 2**64 - 1)), max_size=4)):
        extra += varint(number << 3) + varint(value)
    if draw(st.booleans()):
        extra += varint((9999 << 3) | 1) + struct.pack("<d", math.nan)
    return encoded + extra


def plausible_bases(model: str = "llama", embedder: str = "embed", classifier: str = "classify",
                    sparse: str = "sparse", speech: str = "speech") -> dict[str, object]:
    """RPC name -> a request that passes validation, for ``on_top_of`` to change one field of."""
    from smg_grpc_proto.generated import common_pb2  # noqa: F401 - registers the shared messages

    from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
    from service.gen.mlxgrpc.v1 import speech_pb2 as speech_pb
    from tests.fixtures.whisper import wav

    pb, v, m = inference_service_pb2, vllm_engine_pb2, mlx_engine_pb2
    ids = [5, 6, 7, 8, 9, 10]
    return {
        "InferenceService/Generate": pb.GenerateRequest(
            model=model, chat=gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content="Hello there")]),
            stopping=gen_pb.StoppingCriteria(max_tokens=2), response_format=gen_pb.ResponseFormat(json_object=True)),
        "InferenceService/Embed": pb.EmbedRequest(model=embedder, inputs=["Hello"]),
        "InferenceService/Rerank": pb.RerankRequest(model=embedder, query="boats", documents=["a harbour"]),
        "InferenceService/Classify": pb.ClassifyRequest(model=classifier, inputs=["a harbour", "boats"]),
        "InferenceService/EmbedSparse": pb.EmbedSparseRequest(model=sparse, inputs=["a harbour", "boats"]),
        "InferenceService/Transcribe": speech_pb.TranscribeRequest(
            model=speech, audio=speech_pb.Audio(data=wav(0.5), media_type="audio/wav")),
        "InferenceService/Tokenize": pb.TokenizeRequest(model=model, text="Hello"),
        "InferenceService/Detokenize": pb.DetokenizeRequest(model=model, token_ids=ids),
        "InferenceService/Prefetch": pb.PrefetchRequest(model=model, text="Hello there"),
        "InferenceService/PlanMemory": pb.PlanMemoryRequest(model=model, context_tokens=100, max_generation_tokens=8),
        "VllmEngine/Generate": v.GenerateRequest(request_id="v1", tokenized=v.TokenizedInput(input_ids=ids),
                                                 sampling_params=v.SamplingParams(max_tokens=2)),
        "VllmEngine/Embed": v.EmbedRequest(request_id="e1", tokenized=v.TokenizedInput(input_ids=ids)),
        "MlxEngine/Generate": m.GenerateRequest(request_id="m1", tokenized=m.TokenizedInput(input_ids=ids),
                                                sampling_params=m.SamplingParams(max_tokens=2)),
    }


@dataclass(frozen=True)
class Call:
    """One fuzzed call: the method, the bytes sent, and the message they encode (None when
    tampered)."""

    rpc: Rpc
    payload: bytes
    message: object | None


def calls(methods: list[Rpc], sizes: Sizes = Sizes(), *, raw_share: int = 8,
          bases: dict[str, object] | None = None) -> st.SearchStrategy[Call]:
    """A call of any of ``methods``; about one in ``raw_share`` is tampered bytes, and for a
    method in ``bases`` (default ``plausible_bases()``) half are its valid request with one field
    drawn."""
    builder = MessageStrategies(sizes)
    bases = plausible_bases() if bases is None else bases

    def of(rpc: Rpc) -> st.SearchStrategy[Call]:
        messages = builder.of(rpc.request.DESCRIPTOR)
        if rpc.name in bases:
            messages = st.one_of(messages, builder.on_top_of(bases[rpc.name]))
        good = messages.map(lambda m: Call(rpc, m.SerializeToString(), m))
        bad = messages.flatmap(lambda m: tampered(m.SerializeToString())).map(lambda b: Call(rpc, b, None))
        return st.one_of(*([good] * (raw_share - 1)), bad)

    return st.sampled_from(methods).flatmap(of)
