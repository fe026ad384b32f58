"""A server started with ``--numerics llama`` serves the embedded GGUF with llama.cpp's
products: it answers through the generated stubs, and a start that cannot honour the
mode (a model that is not a GGUF file) fails instead of quietly serving exact numerics."""

from __future__ import annotations

import shutil
import sys

import pytest

from engine.loading.embedded import default_generation_model
from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.cluster import Process, Replica
from tests.kernel_helpers import kernels_ext


def test_a_llama_numerics_server_answers_through_the_stubs(gguf_cache, tmp_path):
    kernels_ext()
    model = tmp_path / "smol"
    model.mkdir()
    shutil.copy(default_generation_model(), model / "smol.gguf")
    replica = Replica("llama-numerics", model / "smol.gguf", tmp_path, "--numerics", "llama")
    try:
        replica.wait_until(replica.serving, 180, "health SERVING")
        responses = list(replica.stub.Generate(pb.GenerateRequest(
            model="smol.gguf", text="The capital of France is",
            stopping=gen_pb.StoppingCriteria(max_tokens=8)), timeout=60))
        text = "".join(r.delta.text for r in responses if r.HasField("delta"))
        assert responses[-1].finished.usage.completion_tokens == 8 and "Paris" in text, text
        assert "ggml_linear x210" in replica.log_path.read_text()
    finally:
        replica.stop()


def test_llama_numerics_on_a_model_that_is_no_gguf_file_fail_the_start(fixture_models, tmp_path):
    kernels_ext()
    server = Process("refused", [sys.executable, "-m", "service", "serve", "--port", "0", "--no-embedding",
                                 "--model", f"llama={fixture_models['llama']}", "--numerics", "llama"],
                     tmp_path, cwd=tmp_path)
    try:
        server.proc.wait(120)
    finally:
        server.stop()
    assert server.proc.returncode != 0
    assert "GGUF file" in server.log_tail()
