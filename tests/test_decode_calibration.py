"""PlanMemory's decode prediction and context cap: the calibration's arithmetic, that it
measures the loaded model, and ``max_safe_context`` never beyond the model's context.
How close the prediction comes to the rate reached is a benchmark (``python -m bench.calibration``)."""

from __future__ import annotations

import json

import pytest

from engine.hardware.machine import MIB, measure_matvec_bandwidth
from engine.memory.calibration import DecodeCalibration, calibrate_decode, measure_decode_step
from engine.memory.facts import facts_from_model
from engine.memory.plan import kv_read_bytes, plan_memory
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb


def test_calibration_adds_overhead_to_the_read():
    calibration = DecodeCalibration(bandwidth=10e9, overhead_seconds=0.02, step_seconds=0.07, context=16)
    assert calibration.tokens_per_second(500_000_000) == pytest.approx(1 / (0.02 + 0.05))
    assert calibration.tokens_per_second(0) == pytest.approx(50.0)


def _llama(fixture_models):
    import mlx_lm

    model, _ = mlx_lm.load(str(fixture_models["llama"]))
    return model, facts_from_model(model, json.loads((fixture_models["llama"] / "config.json").read_text()))


def test_plan_uses_the_calibration_and_caps_the_context(fixture_models):
    _, facts = _llama(fixture_models)
    calibration = DecodeCalibration(bandwidth=5e9, overhead_seconds=0.01, step_seconds=0.011, context=16)
    plan = plan_memory(facts, context_tokens=1000, usable=8 << 30, decode=calibration, context_limit=4096)
    read = facts.weights_bytes + kv_read_bytes(facts, 1000)
    assert plan.predicted_decode_tps == pytest.approx(calibration.tokens_per_second(read))
    assert plan.max_safe_context == 4096  # 8 GiB would hold far more than the model's context
    uncapped = plan_memory(facts, context_tokens=1000, usable=8 << 30, bandwidth=5e9)
    assert uncapped.max_safe_context > 4096
    assert uncapped.predicted_decode_tps == pytest.approx(5e9 / read)  # no overhead known: an upper bound


def test_calibration_measures_this_model(fixture_models):
    model, facts = _llama(fixture_models)
    calibration = calibrate_decode(model, facts)
    assert calibration is not None
    read = facts.weights_bytes + kv_read_bytes(facts, calibration.context)
    # The matvec's figure (measured once per process), unless the step itself read faster.
    assert calibration.bandwidth == max(measure_matvec_bandwidth(), read / calibration.step_seconds)
    assert calibration.overhead_seconds >= 0 and calibration.step_seconds > 0
    # At the context it was measured at, the prediction is the measured step.
    assert calibration.tokens_per_second(read) == pytest.approx(1 / calibration.step_seconds)
    assert measure_decode_step(model, context=4, steps=2, warmup=1) > 0


def test_matvec_bandwidth_is_plausible():
    small = measure_matvec_bandwidth(16 * MIB)
    assert small > 1e8  # more than 100 MB/s: the matrix really was read
    assert measure_matvec_bandwidth(16 * MIB) == small  # cached


async def test_served_plan_never_exceeds_the_model_context(stub):
    info = (await stub.GetModelInfo(pb.GetModelInfoRequest(model="llama"))).info
    plan = (await stub.PlanMemory(pb.PlanMemoryRequest(model="llama", context_tokens=1024))).plan
    assert 0 < plan.max_safe_context <= info.context_length
    assert plan.HasField("predicted_decode_tps") and plan.predicted_decode_tps > 0
