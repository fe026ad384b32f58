"""Adapters on the engine thread's side: fit checks, per-row deltas, unload, memory.

Reference: mlx-lm's own adapter layers (``mlx_lm.load(base, adapter_path=...)``) on
the same weights. Rows of one forward may use different adapters (or none); each
row must score as it does alone, and base rows exactly as without adapters.
"""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import mlx_lm
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from engine.adapters.bank import AdapterBank
from engine.errors import AdapterCapacity, AdapterMismatch, DoesNotFit, InvalidRequest
from engine.memory.budget import MemoryBudget
from engine.memory.facts import facts_from_model

TOKENS = [[5, 17, 42, 99, 7, 300, 12, 8], [250, 3, 77, 90, 91, 92, 93, 94],
          [11, 22, 33, 44, 55, 66, 77, 88], [400, 401, 402, 403, 1, 2, 3, 4]]
ATOL = 1e-3


@pytest.fixture
def base(fixture_models):
    model, _ = mlx_lm.load(str(fixture_models["llama"]))
    return model


def scores(model, tokens, bank=None, keys=()):
    """Scores [B, L, V] of a fresh forward, its rows routed to ``keys``."""
    ids = mx.array(tokens)
    if bank is None:
        return model(ids, cache=make_prompt_cache(model))
    with bank.routing.routed(keys):
        out = model(ids, cache=make_prompt_cache(model))
        mx.eval(out)
    return out


def close(a, b):
    assert mx.allclose(a, b, atol=ATOL).item(), float(mx.abs(a - b).max())


@pytest.mark.parametrize("name", ["tone", "qv", "dora"])
def test_a_routed_row_scores_as_mlx_lm_with_the_adapter(base, fixture_models, fixture_adapters, name):
    reference, _ = mlx_lm.load(str(fixture_models["llama"]), adapter_path=str(fixture_adapters[name]))
    bank = AdapterBank(base, "llama")
    key = bank.load(name, str(fixture_adapters[name])).key
    ours = scores(base, TOKENS[:1], bank, [key])
    close(ours, reference(mx.array(TOKENS[:1])))
    assert not mx.allclose(ours, base(mx.array(TOKENS[:1])), atol=1.0).item()  # the adapter matters


def test_adapters_on_a_quantized_base_score_as_mlx_lm(fixture_models, fixture_adapters):
    import mlx.nn as nn
    from mlx_lm.utils import load_adapters

    ours, reference = (mlx_lm.load(str(fixture_models["llama"]))[0] for _ in range(2))
    for model in (ours, reference):
        nn.quantize(model, group_size=32, bits=8)
    load_adapters(reference, str(fixture_adapters["tone"]))
    bank = AdapterBank(ours, "llama")
    key = bank.load("tone", str(fixture_adapters["tone"])).key
    close(scores(ours, TOKENS[:2], bank, [key, key]), reference(mx.array(TOKENS[:2])))


def test_rows_of_different_adapters_in_one_forward_score_as_alone(base, fixture_adapters):
    bank = AdapterBank(base, "llama")
    keys = [bank.load(n, str(fixture_adapters[n])).key for n in ("tone", "dora", "qv")]
    rows = [keys[0], "", keys[1], keys[2]]
    before = scores(base, TOKENS)
    mixed = scores(base, TOKENS, bank, rows)
    for i, key in enumerate(rows):
        close(mixed[i], scores(base, [TOKENS[i]], bank, [key])[0])
    assert mx.array_equal(mixed[1], before[1]).item()  # a base row is exactly the base model's


def test_forwards_without_adapter_rows_are_the_base_model_exactly(base, fixture_adapters):
    before = scores(base, TOKENS)
    bank = AdapterBank(base, "llama")
    bank.load("tone", str(fixture_adapters["tone"]))
    assert mx.array_equal(scores(base, TOKENS), before).item()
    assert mx.array_equal(scores(base, TOKENS, bank, ["", "", "", ""]), before).item()


def test_unload_gives_the_layers_back_untouched(base, fixture_adapters):
    classes = {path: type(m) for path, m in base.named_modules()}
    weights = dict(tree_flatten(base.parameters()))
    bank = AdapterBank(base, "llama")
    keys = [bank.load(n, str(fixture_adapters[n])).key for n in ("tone", "qv", "dora")]
    assert dict(tree_flatten(base.parameters())).keys() == weights.keys()  # adapters are no parameters
    alone = [scores(base, TOKENS[:1], bank, [key]) for key in keys]
    bank.unload(keys[2])  # the others score as before
    for key, before in zip(keys[:2], alone):
        close(scores(base, TOKENS[:1], bank, [key]), before)
    bank.unload(keys[0])
    assert type(base.model.layers[0].mlp.down_proj) is classes["model.layers.0.mlp.down_proj"]
    assert type(base.model.layers[1].self_attn.q_proj) is not classes["model.layers.1.self_attn.q_proj"]
    bank.unload(keys[1])
    assert {path: type(m) for path, m in base.named_modules()} == classes
    after = dict(tree_flatten(base.parameters()))
    assert all(after[k] is weights[k] for k in weights)  # never modified, never copied
    assert bank.nbytes == 0 and bank.keys == []


def test_an_adapter_of_another_model_is_refused_saying_what_differs(base, fixture_adapters):
    bank = AdapterBank(base, "llama")
    with pytest.raises(AdapterMismatch) as err:
        bank.load("other", str(fixture_adapters["other"]))
    assert "does not fit model 'llama'" in err.value.message
    assert "8 tensors differ in shape (model.layers.0.self_attn.k_proj.lora_b: adapter (4, 64), model expects (4, 32)" \
        in err.value.message
    assert bank.keys == [] and bank.nbytes == 0


def test_a_rank_that_is_not_the_tensors_rank_is_refused(base, fixture_adapters, tmp_path):
    lying = _copy(fixture_adapters["tone"], tmp_path, lambda c: c["lora_parameters"].update(rank=8))
    with pytest.raises(InvalidRequest, match=r"lora_parameters.rank is 8 but tensor .* has shape \(\d+, 4\)"):
        AdapterBank(base, "llama").load("lying", str(lying))


def test_layers_the_model_lacks_are_refused(base, fixture_adapters, tmp_path):
    deeper = _copy(fixture_adapters["tone"], tmp_path, lambda c: c["lora_parameters"].update(keys=["attn.c_proj"]))
    with pytest.raises(AdapterMismatch, match="selects no layer"):
        AdapterBank(base, "llama").load("deeper", str(deeper))
    fewer = _copy(fixture_adapters["tone"], tmp_path / "b", lambda c: c.update(num_layers=1))
    with pytest.raises(AdapterMismatch, match=r"name no target layer of the model \(model\.layers\.0\."):
        AdapterBank(base, "llama").load("fewer", str(fewer))


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(fine_tune_type="full"), "is not an adapter"),
    (lambda c: c["lora_parameters"].pop("scale") and c["lora_parameters"].update(alpha=16), "not 'alpha'"),
    (lambda c: c.pop("lora_parameters"), "no lora_parameters"),
])
def test_directories_that_hold_no_adapter_are_invalid(base, fixture_adapters, tmp_path, change, message):
    broken = _copy(fixture_adapters["tone"], tmp_path, change)
    with pytest.raises(InvalidRequest, match=message) as err:
        AdapterBank(base, "llama").load("broken", str(broken))
    assert err.value.field == "path"


def test_missing_or_damaged_files_are_invalid(base, fixture_adapters, tmp_path):
    bank = AdapterBank(base, "llama")
    with pytest.raises(InvalidRequest, match="not an adapter directory"):
        bank.load("nothing", str(tmp_path / "nowhere"))
    damaged = _copy(fixture_adapters["tone"], tmp_path, lambda c: None)
    (damaged / "adapters.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(InvalidRequest, match="cannot read adapters.safetensors"):
        bank.load("damaged", str(damaged))
    (damaged / "adapter_config.json").write_text("{")
    with pytest.raises(InvalidRequest, match="cannot read adapter_config.json"):
        bank.load("damaged", str(damaged))


def test_adapter_bytes_come_out_of_the_memory_budget(base, fixture_models, fixture_adapters):
    config = json.loads((fixture_models["llama"] / "config.json").read_text())
    facts = facts_from_model(base, config)
    budget = MemoryBudget(facts, usable=facts.weights_bytes + (8 << 20), reserve_bytes=0, prefill_chunk=8)
    bank = AdapterBank(base, "llama")
    room = budget.budget_bytes
    info = bank.load("tone", str(fixture_adapters["tone"]), budget=budget)
    assert budget.resident_bytes == bank.nbytes >= info.nbytes > 0
    assert budget.budget_bytes == room - bank.nbytes
    assert budget.try_reserve("busy", budget.max_context)  # the rest is held by a request
    with pytest.raises(AdapterCapacity, match="retry later"):
        bank.load("qv", str(fixture_adapters["qv"]), budget=budget)
    budget.release("busy")
    tiny = MemoryBudget(facts, usable=facts.weights_bytes + 1024, reserve_bytes=0, prefill_chunk=8)
    with pytest.raises(DoesNotFit, match="can never fit"):
        AdapterBank(base, "llama").load("tone", str(fixture_adapters["tone"]), budget=tiny)


def _copy(source, root, change):
    target = root / "copy"
    shutil.copytree(source, target)
    config = json.loads((target / "adapter_config.json").read_text())
    change(config)
    (target / "adapter_config.json").write_text(json.dumps(config))
    return target


def test_a_layer_routes_rows_of_any_input_layout():
    import mlx.nn as nn

    from engine.adapters.fit import LayerPart
    from engine.adapters.layers import LayerStack
    from engine.adapters.routing import Routing

    linear, routing = nn.Linear(8, 6, bias=False), Routing()
    a, b = mx.random.normal((8, 2)), mx.random.normal((2, 6))
    LayerStack(linear, routing).add("k#1", LayerPart("p", linear, a, b, 0.5, None))
    x = mx.random.normal((2, 3, 8))
    with routing.routed(["k#1", ""]):
        shapes = [linear(x), linear(x[:, 0]), linear(x[:, None])]
    delta = 0.5 * ((x[0] @ a) @ b)
    close(shapes[0][0], x[0] @ linear.weight.T + delta)
    close(shapes[0][1], x[1] @ linear.weight.T)  # the base row
    close(shapes[1], shapes[0][:, 0])
    close(shapes[2][:, 0], shapes[0])
    with routing.routed(["k#1", ""]), pytest.raises(RuntimeError, match="cannot route 2 rows"):
        linear(x.reshape(6, 8))
