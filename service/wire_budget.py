"""A request's wire bytes counted before protobuf builds it: fields, repeated elements, packed numbers.

Parsing allocates every sub-message first and holds the event loop meanwhile, so a request over
``SCAN_FROM`` bytes is not parsed by the deserializer: its raw bytes are walked (iteratively, by
its descriptor) before its handler runs, refused at the first cap they pass, and parsed only
within them.

Invariants: the walk visits at most ``max_fields`` fields whatever the bytes, so its cost is
bounded, and it gives the loop back every ``SLICE_MASK + 1`` fields (a thread would not help: the
interpreter lock makes the loop wait for it); a field it refuses is named by its API path
(``chat.tools``, ``chat.messages[3].parts``); bytes it cannot walk are left to the parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generator, Mapping

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from engine.generation.grammar.formats import GrammarLimits
from engine.validation import Limits

from .calls import current_call
from .handlers import FACTORIES, Malformed, behavior_of
from .status import status_of

SCAN_FROM = 64 << 10  # smaller requests hold at most 32k fields: parsing them costs a few ms
SLICE_MASK = 1023  # the walk gives the event loop back every 1024 fields (well under a millisecond)
MAX_PENDING_WALKS = 32  # large requests being walked at once; more: RESOURCE_EXHAUSTED
RETRY_AFTER_S = 0.5
_VARINT_BYTES = bytes(0 if b < 0x80 else 1 for b in range(256))  # a packed varint ends on a 0 here
_PACKED_WIDTH = {FieldDescriptor.TYPE_FIXED32: 4, FieldDescriptor.TYPE_SFIXED32: 4, FieldDescriptor.TYPE_FLOAT: 4,
                 FieldDescriptor.TYPE_FIXED64: 8, FieldDescriptor.TYPE_SFIXED64: 8, FieldDescriptor.TYPE_DOUBLE: 8}


def static_caps(limits: Limits) -> dict[str, tuple[int, str]]:
    """Repeated fields whose cap does not depend on the model, by full name: (cap, what it counts)."""
    caps = {
        "mlxgrpc.v1.ChatMessages.tools": (limits.max_tools, "tools"),
        "mlxgrpc.v1.ChatMessages.template_kwargs": (limits.max_template_kwargs, "entries"),
        "mlxgrpc.v1.ChatMessage.parts": (limits.max_message_parts, "parts"),
        "mlxgrpc.v1.ChatMessage.tool_calls": (limits.max_tool_calls, "tool calls"),
        "mlxgrpc.v1.StoppingCriteria.stop": (limits.max_stop_strings, "stop strings"),
        "mlxgrpc.v1.StoppingCriteria.stop_token_ids": (limits.max_stop_token_ids, "ids"),
        "mlxgrpc.v1.SamplingParams.logit_bias": (limits.max_logit_bias, "entries"),
        "mlxgrpc.v1.EmbedRequest.inputs": (limits.max_embed_inputs, "inputs"),
        "mlxgrpc.v1.RerankRequest.documents": (limits.max_embed_inputs, "documents"),
        "mlxgrpc.v1.ClassifyRequest.inputs": (limits.max_embed_inputs, "inputs"),
        "mlxgrpc.v1.EmbedSparseRequest.inputs": (limits.max_embed_inputs, "inputs"),
        "mlxgrpc.v1.ResponseFormat.Choice.options": (GrammarLimits.max_options, "options"),
    }
    for contract in ("vllm.grpc.engine", "mlx.grpc.engine"):
        caps[f"{contract}.SamplingParams.logit_bias"] = (limits.max_logit_bias, "entries")
        caps[f"{contract}.SamplingParams.stop_token_ids"] = (limits.max_stop_token_ids, "ids")
    caps["vllm.grpc.engine.SamplingParams.stop"] = (limits.max_stop_strings, "stop strings")
    caps["vllm.grpc.engine.ChoiceConstraint.choices"] = (GrammarLimits.max_options, "options")
    return caps


@dataclass(frozen=True)
class Overflow:
    field: str  # the API path of the field that passed its cap
    description: str


class Overbudget(Malformed):
    """A request refused on its wire bytes: INVALID_ARGUMENT naming the field."""

    def __init__(self, type_name: str, overflow: Overflow):
        super().__init__(type_name, ValueError(overflow.description))
        self.overflow = overflow

    def status(self) -> grpc.Status:
        return status_of(grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_TOO_COMPLEX",
                         f"{self.overflow.field}: {self.overflow.description}", field=self.overflow.field)


class _Walk:
    """One walk's counters: fields it may still visit, packed numbers seen."""

    __slots__ = ("left", "numbers")

    def __init__(self, max_fields: int):
        self.left, self.numbers = max_fields, 0


class WireBudget:
    """Walks one request type's wire bytes against ``caps`` and the request-wide limits."""

    def __init__(self, descriptor: Descriptor, caps: Mapping[str, tuple[int, str]], max_fields: int,
                 max_numbers: int):
        self.descriptor = descriptor
        self.caps = caps
        self.max_fields, self.max_numbers = max_fields, max_numbers
        self._types: dict[str, dict[int, _Field]] = {}

    def _fields(self, descriptor: Descriptor) -> dict[int, _Field]:
        found = self._types.get(descriptor.full_name)
        if found is None:
            found = self._types[descriptor.full_name] = {f.number: _field(f, self.caps) for f in descriptor.fields}
        return found

    def check(self, data: bytes) -> Overflow | None:
        """The first cap ``data`` passes, or None (also when it is not walkable protobuf)."""
        steps = self.steps(data)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    async def walk(self, data: bytes) -> Overflow | None:
        """``check`` on the event loop, giving it back every ``SLICE`` fields."""
        steps = self.steps(data)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)

    def steps(self, data: bytes) -> Generator[None, None, Overflow | None]:
        """The walk, yielding every ``SLICE`` fields; returns the first cap passed, or None."""
        walk = _Walk(self.max_fields)
        stack: list = [(None, 0, len(data), (), 0)]  # (field, start, end, parent's path, index)
        try:
            while stack:
                overflow = yield from self._message(data, stack, walk)
                if overflow is not None:
                    return overflow
        except (IndexError, ValueError):
            return None  # truncated or not protobuf: the parser says so
        return None

    def _message(self, data: bytes, stack: list, walk: _Walk) -> Generator[None, None, Overflow | None]:
        """Walks one message's fields; pushes its sub-messages. ``path``: (name, index or None) pairs."""
        field, pos, end, path, index = stack.pop()
        if field is not None:
            path = (*path, (field.name, index if field.listed else None))
        fields = self._fields(field.message if field is not None else self.descriptor)
        counts: dict[int, int] = {}
        left = walk.left
        while pos < end:
            left -= 1
            if left < 0:  # named by the field that holds most of them here, if it is repeated
                most = max(counts, key=counts.__getitem__, default=None)
                return Overflow(_path(path, fields[most].name if most in fields else ""),
                                f"at most {self.max_fields} fields in one request (--max-request-fields)")
            if not left & SLICE_MASK:
                yield
            key = data[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = _varint(data, pos)
            wire, number = key & 7, key >> 3
            field = fields.get(number)
            if wire == 2:
                size = data[pos]
                if size < 0x80:
                    pos += 1
                else:
                    size, pos = _varint(data, pos)
                start = pos
                pos += size
                if pos > end:
                    raise ValueError("truncated")
                if field is None:
                    continue
                if field.message is not None:  # walked too: the fields inside cost parsing
                    count = counts.get(number, 0)
                    counts[number] = count + 1
                    if field.cap is not None and count >= field.cap[0]:
                        return self._over(field.name, field.cap, path)
                    if size:  # an empty one holds nothing to walk
                        stack.append((field, start, pos, path, count))
                    continue
                elif field.packed:
                    overflow = self._packed(field, path, counts, data, start, pos, walk)
                    if overflow is not None:
                        return overflow
                    continue
            elif wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire not in (3, 4):  # a group's start and end are counted as fields, nothing to skip
                raise ValueError("not a wire type")
            if field is not None and field.repeated:
                count = counts[number] = counts.get(number, 0) + 1
                if field.cap is not None and count > field.cap[0]:
                    return self._over(field.name, field.cap, path)
        walk.left = left
        return None

    def _packed(self, field: _Field, path: tuple, counts: dict[int, int], data: bytes, start: int,
                end: int, walk: _Walk) -> Overflow | None:
        size = end - start
        if field.width:
            values = size // field.width
        elif size // 10 > self.max_numbers - walk.numbers:  # a varint is at most 10 bytes: over at once
            values = size // 10
        else:
            values = size - _continued(data, start, end)
        walk.numbers += values
        if walk.numbers > self.max_numbers:
            return Overflow(_path(path, field.name), f"at most {self.max_numbers} numbers in one request's "
                                                     "repeated number fields (--max-request-numbers)")
        count = counts[field.number] = counts.get(field.number, 0) + values
        return self._over(field.name, field.cap, path) if field.cap is not None and count > field.cap[0] else None

    @staticmethod
    def _over(name: str, cap: tuple[int, str], path: tuple) -> Overflow:
        return Overflow(_path(path, name), f"at most {cap[0]} {cap[1]}")


def _path(path: tuple, last: str = "") -> str:
    """The API path: ``chat.messages[3].parts``."""
    names = [name if index is None else f"{name}[{index}]" for name, index in path]
    return ".".join(names + [last] if last else names) or "request"


@dataclass(frozen=True, slots=True)
class _Field:
    number: int
    name: str
    full_name: str
    repeated: bool
    message: Descriptor | None  # a message field's type (map entries included)
    listed: bool  # a repeated message field that is not a map: its elements are indexed in paths
    packed: bool  # a repeated number field: its values may come packed in one length-delimited run
    width: int  # bytes per packed value, 0 for varints
    cap: tuple[int, str] | None  # (most elements per message, what they are), if capped by name


def _field(f: FieldDescriptor, caps: Mapping[str, tuple[int, str]]) -> _Field:
    message = f.message_type if f.type == FieldDescriptor.TYPE_MESSAGE else None
    is_map = message is not None and message.GetOptions().map_entry
    packed = f.is_repeated and message is None and f.type not in _LENGTH_TYPES
    return _Field(f.number, f.name, f.full_name, f.is_repeated, message, f.is_repeated and message is not None
                  and not is_map, packed, _PACKED_WIDTH.get(f.type, 0), caps.get(f.full_name))


_LENGTH_TYPES = frozenset({FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE})


def _continued(data: bytes, start: int, end: int) -> int:
    """Bytes of ``data[start:end]`` that continue a varint (high bit set), counted in C."""
    return data[start:end].translate(_VARINT_BYTES).count(1)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def budget_for(method: str, limits: Limits) -> WireBudget | None:
    """The budget of ``method``'s ('/pkg.Service/Method') request type, None when it is unknown."""
    service, _, name = method.lstrip("/").rpartition("/")
    try:
        found = descriptor_pool.Default().FindServiceByName(service).FindMethodByName(name)
    except KeyError:
        return None
    if found is None:
        return None
    return WireBudget(found.input_type, static_caps(limits), limits.max_request_fields, limits.max_request_numbers)


class Unwalked:
    """A request over ``SCAN_FROM`` bytes as it arrived: walked, then parsed, before its handler runs."""

    def __init__(self, data: bytes):
        self.data = data


class Busy(Malformed):
    """Too many large requests being walked at once: RESOURCE_EXHAUSTED with a retry delay."""

    def __init__(self, type_name: str, pending: int):
        super().__init__(type_name, RuntimeError("busy"))
        self.pending = pending

    def status(self) -> grpc.Status:
        return status_of(grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUESTS_BEING_WALKED",
                         f"{self.pending} large requests are being counted; retry later",
                         retry_after_s=RETRY_AFTER_S)


def deferred(parse: Callable[[bytes], object]) -> Callable[[bytes], object]:
    """The deserializer: small requests parsed at once (on the loop), large ones kept as bytes."""

    def deferred_parse(data: bytes):
        return Unwalked(data) if len(data) > SCAN_FROM else parse(data)

    return deferred_parse


class Walker:
    """Walks large requests on the event loop in slices, then parses the ones within their caps;
    at most ``max_pending`` at once."""

    def __init__(self, max_pending: int = MAX_PENDING_WALKS):
        self.max_pending = max_pending
        self.pending = 0

    async def parsed(self, request: Unwalked, budget: WireBudget, parse: Callable[[bytes], object]) -> object:
        """The parsed request, or a ``Malformed`` whose status refuses it."""
        name = budget.descriptor.name
        if self.pending >= self.max_pending:
            return Busy(name, self.pending)
        self.pending += 1
        try:
            overflow = await budget.walk(request.data)
        finally:
            self.pending -= 1
        if overflow is not None:
            return Overbudget(name, overflow)
        try:
            return parse(request.data)  # within every cap now: at most max_request_fields fields to build
        except Exception as exc:  # noqa: BLE001 - the caller's bad bytes
            return Malformed(name, exc)


class WireBudgetInterceptor(grpc.aio.ServerInterceptor):
    """Innermost: a unary request over ``SCAN_FROM`` bytes is walked against its budget (in slices,
    the event loop serving others between them), then parsed, before its handler runs."""

    def __init__(self, limits: Limits, walker: Walker | None = None):
        self.limits = limits
        self.walker = walker or Walker()
        self._budgets: dict[str, WireBudget | None] = {}

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        if details.method not in self._budgets:
            self._budgets[details.method] = budget_for(details.method, self.limits)
        budget = self._budgets[details.method]
        if budget is None:
            return handler
        parse, inner = handler.request_deserializer, behavior_of(handler)

        async def ready(request, context: grpc.aio.ServicerContext):
            if not isinstance(request, Unwalked):
                return request
            request = await self.walker.parsed(request, budget, parse)
            if isinstance(request, Malformed):
                await context.abort_with_status(request.status())
            call = current_call()
            if call is not None:  # what the access log could not read from the bytes
                call.request_id = str(getattr(request, "request_id", "") or "")
                call.model = call.model or str(getattr(request, "model", "") or "")
            return request

        if inspect.isasyncgenfunction(inner):
            async def streaming(request, context: grpc.aio.ServicerContext):
                request = await ready(request, context)
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        yield response
            behavior: Callable[..., Any] = streaming
        else:
            async def unary(request, context: grpc.aio.ServicerContext):
                request = await ready(request, context)
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result
            behavior = unary

        factory = FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(behavior, request_deserializer=deferred(parse), response_serializer=handler.response_serializer)
