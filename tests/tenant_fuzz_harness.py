"""Two tenants on one live server, for the tenant fuzzer (tests/test_tenant_fuzz.py, bench/fuzz.py).

``acme`` generates prompts holding a canary string; ``beta`` (and callers without a valid
token) then send fuzzed calls of every RPC. A finding is: an answer to them (message, status
text or trailing metadata) holding acme's canary, acme's tenant name or a server path that the
call did not itself send; a repeated integer field holding a run of ``RUN`` of acme's prompt ids;
``cached_tokens > 0`` when beta probes with a prompt only acme used; an acme request ended by
someone else's Cancel or Abort; an INTERNAL or UNKNOWN status. Health latency (a poller on its
own channel) and the server's RSS are recorded alongside, for the bench to print.

Invariant: every call is bounded (a deadline, a cap on streamed messages); the fuzz body never
raises, so hypothesis neither shrinks nor stops: findings are collected and judged at the end.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import grpc
from google.protobuf import descriptor as _d
from google.protobuf import text_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb

from service import bearer_tokens
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.rpc_strategies import SHARED_REQUEST_IDS, SHARED_SESSION_IDS, Call

F = _d.FieldDescriptor
OWNER, PROBER = "acme", "beta"
TOKENS = {"acme": "tok-acme-7d1f", "beta": "tok-beta-52c9", "ops": "tok-ops-90ab", "router": "tok-router-3e77"}
RUN = 8  # acme prompt ids in a row that count as a leak
# categories of findings
IDS, TEXT, NAME, PATH, CACHE_HIT, CANCELLED, STATUS = ("prompt ids", "canary text", "tenant name", "server path",
                                                      "prefix-cache hit", "acme cancelled", "INTERNAL/UNKNOWN")
MAX_STREAMED = 64  # messages read from one answer stream before the call is cancelled
STREAM_DEADLINE_S = {"SubscribeKvEvents": 1.0, "GetTokenizer": 20.0}
CALLERS = ("beta",) * 18 + ("anonymous", "bad-token")
BAD_STATUSES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
INT_TYPES = (F.CPPTYPE_INT32, F.CPPTYPE_INT64, F.CPPTYPE_UINT32, F.CPPTYPE_UINT64)


def has_router_role() -> bool:
    return "router" in bearer_tokens.ROLES


def tokens_file(path: Path) -> Path:
    """acme and beta (inference), ops (admin), and router where that role exists."""
    lines = [f"{TOKENS['acme']} acme inference", f"{TOKENS['beta']} beta inference", f"{TOKENS['ops']} ops admin"]
    if has_router_role():
        lines.append(f"{TOKENS['router']} gateway router")
    path.write_text("\n".join(lines) + "\n")
    return path


def bearer(caller: str) -> tuple[tuple[str, str], ...]:
    if caller == "anonymous":
        return ()
    token = TOKENS.get(caller, "tok-not-configured")
    return (("authorization", f"Bearer {token}"),)


# --- acme's secrets ------------------------------------------------------------------------

PROBE_KINDS = ("InferenceService/Generate text", "InferenceService/Generate tokens", "InferenceService/Prefetch",
               "VllmEngine/Generate", "MlxEngine/Generate")


@dataclass
class Secrets:
    """What beta must never receive."""

    canary: str
    needles: tuple[str, ...]  # canary, tenant name, server paths
    windows: frozenset[tuple[int, ...]]  # every RUN-long run of acme's prompt ids
    probes: dict[str, tuple[str, list[int]]]  # probe kind -> (a prompt only acme used, its ids)
    background: str  # the prompt acme keeps generating during the fuzz

    def category(self, needle: str) -> str:
        return TEXT if needle == self.canary else NAME if needle == OWNER else PATH


def canary_of(seed: int) -> str:
    return "zyzzyva" + hashlib.sha256(f"canary-{seed}".encode()).hexdigest()[:12] + "quokka"


def acme_prompt(index: int, canary: str) -> str:
    # a distinct first word per prompt: no two share a prefix-cache block
    return (f"{index}. Memo {canary}: the northern harbour office keeps eleven boats, four cranes and a "
            f"ledger nobody reads; the keeper counts them every morning before the sun rises.")


def windows_of(ids: list[int]) -> set[tuple[int, ...]]:
    """Runs of RUN ids with at least half of them distinct (a repeated id is no evidence)."""
    return {w for i in range(len(ids) - RUN + 1) if len(set(w := tuple(ids[i:i + RUN]))) >= RUN // 2}


def plant(channel: grpc.Channel, seed: int, model: str, paths: Iterable[str]) -> Secrets:
    """acme generates its prompts (each once, so each is in its prefix cache) and tokenizes them."""
    stub = pb_grpc.InferenceServiceStub(channel)
    canary = canary_of(seed)
    meta = bearer(OWNER)
    prompts = {kind: acme_prompt(i, canary) for i, kind in enumerate(("background",) + PROBE_KINDS)}
    ids: dict[str, list[int]] = {}
    windows: set[tuple[int, ...]] = set()
    for kind, prompt in prompts.items():
        for special in (False, True):
            got = list(stub.Tokenize(pb.TokenizeRequest(model=model, text=prompt, add_special_tokens=special),
                                     metadata=meta, timeout=60).token_ids)
            windows |= windows_of(got)
            ids.setdefault(kind, got)
        _acme_generate(stub, prompt, model, max_tokens=2)
    # the probes can fail: acme's own repeat is served from its prefix cache
    again = _acme_generate(stub, prompts["background"], model, max_tokens=1)
    assert again.started.cached_tokens > 0, "acme's repeat missed its own prefix cache: the probes would prove nothing"
    needles = tuple(dict.fromkeys([canary, OWNER, *(p for p in paths if p)]))
    return Secrets(canary, needles, frozenset(windows), {k: (prompts[k], ids[k]) for k in PROBE_KINDS},
                   prompts["background"])


def _acme_generate(stub, prompt: str, model: str, max_tokens: int, **kw) -> pb.GenerateResponse:
    req = pb.GenerateRequest(model=model, text=prompt, stopping=gen_pb.StoppingCriteria(
        max_tokens=max_tokens, ignore_eos=True), **kw)
    started = None
    for msg in stub.Generate(req, metadata=bearer(OWNER), timeout=120):
        if msg.WhichOneof("event") == "started":
            started = msg
    return started


def probe_calls(secrets: Secrets, model: str) -> list[tuple[str, str, object, bool]]:
    """(kind, path, request, streaming): beta sends acme's exact prompts, one per kind, once."""
    sampling = vllm_pb.SamplingParams(max_tokens=1)
    text_g, _ = secrets.probes["InferenceService/Generate text"]
    _, ids_g = secrets.probes["InferenceService/Generate tokens"]
    text_p, _ = secrets.probes["InferenceService/Prefetch"]
    _, ids_v = secrets.probes["VllmEngine/Generate"]
    _, ids_m = secrets.probes["MlxEngine/Generate"]
    one = gen_pb.StoppingCriteria(max_tokens=1)
    return [
        ("InferenceService/Generate text", "/mlxgrpc.v1.InferenceService/Generate",
         pb.GenerateRequest(model=model, text=text_g, stopping=one), True),
        ("InferenceService/Generate tokens", "/mlxgrpc.v1.InferenceService/Generate",
         pb.GenerateRequest(model=model, tokens=gen_pb.TokenIds(ids=ids_g), stopping=one), True),
        ("InferenceService/Prefetch", "/mlxgrpc.v1.InferenceService/Prefetch",
         pb.PrefetchRequest(model=model, text=text_p), False),
        ("VllmEngine/Generate", "/vllm.grpc.engine.VllmEngine/Generate",
         vllm_pb.GenerateRequest(request_id="probe-v", tokenized=vllm_pb.TokenizedInput(input_ids=ids_v),
                                 sampling_params=sampling), True),
        ("MlxEngine/Generate", "/mlx.grpc.engine.MlxEngine/Generate",
         mlx_pb.GenerateRequest(request_id="probe-m", tokenized=mlx_pb.TokenizedInput(input_ids=ids_m),
                                sampling_params=mlx_pb.SamplingParams(max_tokens=1)), True),
    ]


# --- looking for leaks ---------------------------------------------------------------------

def _int_runs(msg) -> Iterable[tuple[str, list[int]]]:
    """(field name, values) of every repeated integer field in ``msg``, nested ones too."""
    for fd, value in msg.ListFields():
        if fd.cpp_type == F.CPPTYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                if fd.message_type.fields_by_name["value"].cpp_type == F.CPPTYPE_MESSAGE:
                    for sub in value.values():
                        yield from _int_runs(sub)
            elif fd.is_repeated:
                for sub in value:
                    yield from _int_runs(sub)
            else:
                yield from _int_runs(value)
        elif fd.is_repeated and fd.cpp_type in INT_TYPES and len(value) >= RUN:
            yield fd.name, list(value)


def _field_values(msg, name: str) -> Iterable[object]:
    for fd, value in msg.ListFields():
        if fd.name == name and not fd.is_repeated:
            yield value
        if fd.cpp_type == F.CPPTYPE_MESSAGE and not fd.message_type.GetOptions().map_entry:
            for sub in (value if fd.is_repeated else [value]):
                yield from _field_values(sub, name)


@dataclass
class Sent:
    """What the caller itself sent: an echo of it is no leak."""

    payload: bytes
    windows: set[tuple[int, ...]]

    @classmethod
    def of(cls, payload: bytes, message) -> Sent:
        windows: set[tuple[int, ...]] = set()
        if message is not None:
            for _, values in _int_runs(message):
                windows |= {tuple(values[i:i + RUN]) for i in range(len(values) - RUN + 1)}
        return cls(payload, windows)


def leaks_in_text(text: bytes, sent: Sent, secrets: Secrets) -> list[tuple[str, str]]:
    """(category, what) of each needle in ``text`` that the caller did not send."""
    return [(secrets.category(needle), f"holds {needle!r}") for needle in secrets.needles
            if (n := needle.encode()) in text and n not in sent.payload]


def leaks_in_message(msg, sent: Sent, secrets: Secrets) -> list[tuple[str, str]]:
    found = leaks_in_text(msg.SerializeToString(), sent, secrets)
    for name, values in _int_runs(msg):
        runs = [i for i in range(len(values) - RUN + 1)
                if (w := tuple(values[i:i + RUN])) in secrets.windows and w not in sent.windows]
        if runs:
            found.append((IDS, f"{name} holds acme's prompt ids ({len(runs)} runs of {RUN}, first at {runs[0]})"))
    return found


# --- the fuzz ------------------------------------------------------------------------------

@dataclass
class Tally:
    """Outcomes of the fuzz, findings included."""

    sent: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    by_method: collections.Counter = field(default_factory=collections.Counter)
    found: collections.Counter = field(default_factory=collections.Counter)  # (category, method) -> count
    examples: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # the first few of each
    lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, category: str, method: str, text: str) -> None:
        with self.lock:
            self.found[(category, method)] += 1
            kept = self.examples.setdefault((category, method), [])
            if len(kept) < 3:
                kept.append(text)

    def count(self, *categories: str) -> int:
        return sum(n for (c, _), n in self.found.items() if c in categories)

    def report(self, *categories: str) -> str:
        """The findings of ``categories`` (all when none), a few examples of each."""
        lines = []
        for (category, method), n in sorted(self.found.items()):
            if not categories or category in categories:
                lines.append(f"{category} via {method}: {n}")
                lines += [f"    {example}" for example in self.examples[(category, method)]]
        return "\n".join(lines)


def _short(value: object, limit: int = 300) -> str:
    if hasattr(value, "DESCRIPTOR"):
        text = text_format.MessageToString(value, as_one_line=True)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"


class Fuzzer:
    """Sends calls over one channel and judges each answer."""

    def __init__(self, channel: grpc.Channel, secrets: Secrets, tally: Tally, call_timeout_s: float = 60.0):
        self.channel, self.secrets, self.tally = channel, secrets, tally
        self.call_timeout_s = call_timeout_s

    def send(self, call: Call, caller: str) -> str:
        method = call.rpc.path.rsplit("/", 1)[1]
        timeout = STREAM_DEADLINE_S.get(method, self.call_timeout_s)
        kwargs = dict(request_serializer=lambda b: b, response_deserializer=call.rpc.response.FromString)
        sent = Sent.of(call.payload, call.message)
        answers = []
        status = "OK"
        try:
            if call.rpc.streaming:
                stream = self.channel.unary_stream(call.rpc.path, **kwargs)(call.payload, metadata=bearer(caller),
                                                                            timeout=timeout)
                for answer in stream:
                    answers.append(answer)
                    if len(answers) >= MAX_STREAMED:
                        stream.cancel()
                        break
            else:
                answers.append(self.channel.unary_unary(call.rpc.path, **kwargs)(
                    call.payload, metadata=bearer(caller), timeout=timeout))
        except grpc.RpcError as err:
            code = err.code()
            status = code.name
            if code == grpc.StatusCode.CANCELLED and len(answers) >= MAX_STREAMED:
                status = "OK"
            text = (err.details() or "").encode("utf-8", "replace")
            for key, value in (err.trailing_metadata() or ()):
                text += b"\n" + key.encode() + b"=" + (value if isinstance(value, bytes) else value.encode())
            for category, leak in leaks_in_text(text, sent, self.secrets):
                self.tally.find(category, call.rpc.name, f"as {caller}: status {status} {leak}: "
                                                         f"{_short(err.details())}")
            if code in BAD_STATUSES:
                self.tally.find(STATUS, call.rpc.name, f"as {caller}: {status}: {_short(err.details())} <- "
                                f"{_short(call.message if call.message is not None else call.payload)}")
        for answer in answers:
            for category, leak in leaks_in_message(answer, sent, self.secrets):
                self.tally.find(category, call.rpc.name, f"as {caller}: answer {leak}: {_short(answer)}")
        with self.tally.lock:
            self.tally.sent += 1
            self.tally.statuses[status] += 1
            self.tally.by_method[(call.rpc.name, status)] += 1
        return status

    def probe(self, model: str) -> list[str]:
        """beta sends each of acme's probe prompts once; a cached token is a cross-tenant hit."""
        outcomes = []
        for kind, path, request, streaming in probe_calls(self.secrets, model):
            response = next(r for r in _rpcs_by_path() if r.path == path).response
            kwargs = dict(request_serializer=lambda m: m.SerializeToString(), response_deserializer=response.FromString)
            try:
                if streaming:
                    answers = list(self.channel.unary_stream(path, **kwargs)(request, metadata=bearer(PROBER),
                                                                             timeout=120))
                else:
                    answers = [self.channel.unary_unary(path, **kwargs)(request, metadata=bearer(PROBER), timeout=120)]
                outcome = "OK"
            except grpc.RpcError as err:
                answers, outcome = [], err.code().name
                if err.code() in BAD_STATUSES:
                    self.tally.find(STATUS, kind, f"probe: {outcome}: {_short(err.details())}")
            cached = max([int(v) for a in answers for v in _field_values(a, "cached_tokens")], default=0)
            if cached > 0:
                self.tally.find(CACHE_HIT, kind, f"beta's first send of a prompt only acme used reported "
                                                 f"cached_tokens={cached}")
            outcomes.append(f"{kind}: {outcome}, cached_tokens {cached}")
        return outcomes


_RPCS: list = []


def _rpcs_by_path():
    if not _RPCS:
        from tests.rpc_strategies import rpcs

        _RPCS.extend(rpcs())
    return _RPCS


# --- around the fuzz -----------------------------------------------------------------------

class AcmeLoop(threading.Thread):
    """acme keeps generating its canary prompt under the shared request and session ids; a
    request of its that someone else cancels or aborts is a finding."""

    def __init__(self, channel: grpc.Channel, secrets: Secrets, tally: Tally, model: str):
        super().__init__(daemon=True, name="acme")
        self.stub = pb_grpc.InferenceServiceStub(channel)
        self.secrets, self.tally, self.model = secrets, tally, model
        self.stop = threading.Event()
        self.outcomes: collections.Counter = collections.Counter()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            rid, sid = SHARED_REQUEST_IDS[i % len(SHARED_REQUEST_IDS)], SHARED_SESSION_IDS[i % len(SHARED_SESSION_IDS)]
            i += 1
            req = pb.GenerateRequest(model=self.model, text=self.secrets.background, request_id=rid, session_id=sid,
                                     stopping=gen_pb.StoppingCriteria(max_tokens=8, ignore_eos=True))
            try:
                finished = None
                for msg in self.stub.Generate(req, metadata=bearer(OWNER), timeout=60):
                    if msg.WhichOneof("event") == "finished":
                        finished = msg.finished
                outcome = gen_pb.FinishReason.Name(finished.reason) if finished else "no finished event"
            except grpc.RpcError as err:
                outcome = err.code().name
            self.outcomes[outcome] += 1
            if outcome in ("FINISH_REASON_CANCELLED", "CANCELLED", "ABORTED"):
                self.tally.find(CANCELLED, "InferenceService/Generate", f"acme's request {rid!r} ended {outcome}: "
                                                                       f"another tenant's Cancel or Abort reached it")
            self.stop.wait(0.05)


class HealthPoller(threading.Thread):
    """grpc.health.v1 Check every ``interval_s`` on its own channel; latencies in seconds."""

    def __init__(self, address: str, interval_s: float = 0.025, stall_s: float = 0.1):
        super().__init__(daemon=True, name="health")
        self.address, self.interval_s, self.stall_s = address, interval_s, stall_s
        self.latencies: list[float] = []
        self.not_serving = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            while not self.stop.is_set():
                began = time.perf_counter()
                try:
                    if check(health_pb2.HealthCheckRequest(), timeout=10).status != health_pb2.HealthCheckResponse.SERVING:
                        self.not_serving += 1
                except grpc.RpcError:
                    self.not_serving += 1
                self.latencies.append(time.perf_counter() - began)
                self.stop.wait(self.interval_s)

    @property
    def stalls(self) -> int:
        return sum(1 for v in self.latencies if v > self.stall_s)


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        except grpc.RpcError:
            return False
    return status == health_pb2.HealthCheckResponse.SERVING


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def router_sees_acme(channel: grpc.Channel, secrets: Secrets) -> bool:
    """Whether the router's KV event stream holds acme's prompt ids (it should: SMG routes on them)."""
    path = "/vllm.grpc.engine.VllmEngine/SubscribeKvEvents"
    from smg_grpc_proto.generated import common_pb2

    stream = channel.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=common_pb2.KvEventBatch.FromString)(
        common_pb2.SubscribeKvEventsRequest(), metadata=bearer("router"), timeout=5)
    try:
        for batch in stream:
            if any(w in secrets.windows for _, values in _int_runs(batch)
                   for w in (tuple(values[i:i + RUN]) for i in range(len(values) - RUN + 1))):
                stream.cancel()
                return True
    except grpc.RpcError:
        return False
    return False
