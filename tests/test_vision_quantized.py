"""Vision-language checkpoints converted by ``mlx_vlm.convert -q`` (a 4-bit text model in
mlx-vlm's names, the tower left in floats): every family's text model is quantized as its
weights are, per layer from their shapes, and greedy output equals mlx-vlm's on the same
conversion, image and text rows in one batch; a checkpoint quantized otherwise (a Hugging
Face ``quantization_config`` alone, or another MLX mode) is refused at load."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from engine.errors import UnsupportedModel
from tests.fixtures.vision_models import build_gemma3, build_llava, build_smolvlm
from tests.fixtures.vision_qwen import build_qwen2_5_vl, build_qwen3_vl
from tests.helpers import generate
from tests.vision_helpers import CASES, IMAGES, MEDIA, case_chat, case_references, matches, vision_server

BUILD = {"llava": build_llava, "gemma3": build_gemma3, "smolvlm": build_smolvlm, "qwen2_5_vl": build_qwen2_5_vl,
         "qwen3_vl": build_qwen3_vl}
ROWS = [0, 1, 4, 7]  # image rows (one with two images) and a text row
MAX_TOKENS = 10


@pytest.fixture(scope="module", params=list(BUILD))
def converted(request, tmp_path_factory):
    from mlx_vlm.convert import convert

    base = tmp_path_factory.mktemp(f"quantized-{request.param}")
    source = BUILD[request.param](base / "float")
    convert(str(source), str(base / "q4"), quantize=True, q_bits=4, q_group_size=32)
    return base / "q4"


async def test_a_4bit_conversion_is_served_as_mlx_vlm_serves_it(converted):
    reference = case_references(converted, [CASES[i] for i in ROWS], IMAGES, MAX_TOKENS)
    async with vision_server(converted, "vlm") as (stub, engine):
        assert engine.loaded.dtype.startswith("q4 affine")
        outs = await asyncio.gather(*(generate(stub, case_chat(CASES[i], IMAGES, MEDIA, "vlm", MAX_TOKENS))
                                      for i in ROWS))
    for i, out, ref in zip(ROWS, outs, reference):
        assert matches(out.token_ids, ref), (CASES[i], out.token_ids, ref.tokens)


@pytest.mark.parametrize("change", [{"quantization": None, "quantization_config": {"quant_method": "awq"}},
                                    {"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}])
def test_other_quantizations_are_refused(converted, tmp_path, change):
    from engine.loading.model import load_generation_model

    copy = tmp_path / "copy"
    shutil.copytree(converted, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(change)
    config = {k: v for k, v in config.items() if v is not None}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModel):
        load_generation_model(copy, use_kernels=False)
