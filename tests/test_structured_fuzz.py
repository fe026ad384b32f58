"""Hostile response formats through the live server (hypothesis): random JSON
Schemas built from every keyword with extreme values, regexes and Lark grammars
from their metacharacters, huge counts and nesting, choices of odd strings. Each
call must end with a finished event or INVALID_ARGUMENT naming the format's field
(never another status), within a deadline; afterwards the server still answers a
normal request exactly as mlx-lm does and holds no row."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc
from tests.helpers import generate, request
from tests.oracle import ORACLE_PROMPTS, ORACLE_TOKENS

EXAMPLES = int(os.environ.get("MLXGRPC_FORMAT_FUZZ_EXAMPLES", "150"))
DEADLINE_S = 60  # per call: compiling is bounded, so is a constrained generation of a few tokens

counts = st.one_of(st.integers(0, 12), st.sampled_from([0, 1, 1000, 10**6, 2**31, 10**18, -1]))
names = st.one_of(st.text(max_size=8), st.sampled_from(["", "$ref", "a" * 300, "\x00", '"', "\\"]))
regex_atoms = st.sampled_from(["a", ".", "\\d", "\\w", "[a-z]", "[^x]", "(", ")", "|", "*", "+", "?", "{2}",
                               "{0,1000}", "{1000}", "\\p{L}", "^", "$", "\\", "[", "]", "(?i)", "(a|aa)*",
                               "(.*a){12}", "x{500}{500}"])
regexes = st.builds("".join, st.lists(regex_atoms, max_size=12))
lark_atoms = st.sampled_from(["start: ", "start: x\n", "x: ", '"a"', "/[a-z]+/", " | ", "x", " x", "(", ")",
                              "*", "+", "?", "~ 3", "{0,99999}", "%import common.WORD\n", "\n", "%ignore ",
                              "<|im_end|>", "%json {\"type\": \"integer\"}", "@x", "y: y y | \"b\"\n"])
grammars = st.builds("".join, st.lists(lark_atoms, max_size=12))
scalars = st.one_of(st.none(), st.booleans(), counts, st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12), regexes)
keywords = ["type", "properties", "items", "prefixItems", "required", "enum", "const", "anyOf", "oneOf",
            "allOf", "not", "pattern", "format", "minLength", "maxLength", "minItems", "maxItems", "minimum",
            "maximum", "exclusiveMinimum", "multipleOf", "additionalProperties", "$ref", "$defs", "if", "then",
            "patternProperties", "propertyNames", "minProperties", "uniqueItems", "x-guidance"]
types = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "objectx"])


def schema_values(children):
    return st.one_of(scalars, types, st.lists(children, max_size=4), st.dictionaries(names, children, max_size=4),
                     st.sampled_from(["#", "#/$defs/a", "#/properties/x", "date-time", "email", "uuid"]))


schemas = st.recursive(st.dictionaries(st.sampled_from(keywords), scalars, max_size=4),
                       lambda children: st.dictionaries(st.sampled_from(keywords), schema_values(children),
                                                        max_size=5), max_leaves=30)
schema_texts = st.one_of(schemas.map(json.dumps), st.text(max_size=40),
                         st.builds(lambda n: '{"items":' * n + "{}" + "}" * n, st.sampled_from([70, 2000])),
                         st.just('{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}'))
formats = st.one_of(
    st.builds(lambda s: gen_pb.ResponseFormat(json_schema=s), schema_texts),
    st.builds(lambda r: gen_pb.ResponseFormat(regex=r), regexes),
    st.builds(lambda g: gen_pb.ResponseFormat(grammar=g), grammars),
    st.builds(lambda o: gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice(options=o)),
              st.one_of(st.lists(st.text(max_size=6), max_size=6),
                        st.builds(lambda n: ["x"] * n, st.sampled_from([1024, 1025])))),
    st.builds(lambda b: gen_pb.ResponseFormat(json_object=b), st.booleans()),
)


def _call(stub, fmt: gen_pb.ResponseFormat, sampled: bool) -> str:
    req = pb.GenerateRequest(model="llama", text="Hello", response_format=fmt,
                             stopping=gen_pb.StoppingCriteria(max_tokens=12))
    if sampled:
        req.sampling.CopyFrom(gen_pb.SamplingParams(temperature=1.0, seed=3))
    try:
        for msg in stub.Generate(req, timeout=DEADLINE_S):
            if msg.WhichOneof("event") == "finished":
                assert msg.finished.reason in (gen_pb.FINISH_REASON_STOP, gen_pb.FINISH_REASON_LENGTH), msg
                return gen_pb.FinishReason.Name(msg.finished.reason)
        raise AssertionError("a Generate stream ended without its finished event")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{err.code()}: {err.details()}"
        field = f"response_format.{fmt.WhichOneof('format')}"
        assert field in err.details(), err.details()
        return "INVALID_ARGUMENT"


def _run_fuzz(address: str, outcomes: dict[str, int]) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(formats, st.booleans())
        def fuzz(fmt, sampled):
            outcome = _call(stub, fmt, sampled)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        fuzz()


async def test_hostile_formats_never_break_the_server(server, stub, oracle):
    outcomes: dict[str, int] = {}
    await asyncio.to_thread(_run_fuzz, server["address"], outcomes)
    print(f"format fuzz outcomes: {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) >= EXAMPLES
    out = await generate(stub, request(ORACLE_PROMPTS["long"], max_tokens=ORACLE_TOKENS["long"]))
    assert out.token_ids == oracle["llama"]["long"]
    engine = server["models"].generator("llama")
    for _ in range(200):
        if engine.active == 0 and engine.queued == 0:
            break
        await asyncio.sleep(0.05)
    assert (engine.active, engine.queued) == (0, 0)
