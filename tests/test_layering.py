"""Per-layer behaviour (kernels, adapters, prefill checkpoints) goes in through one
mechanism: in rank order whatever the order it arrives in, each removable alone, and
every combination computing what each part computes alone."""

from __future__ import annotations

import itertools

import mlx.core as mx
import mlx.nn as nn
import pytest

from engine import kernels
from engine.adapters.bank import AdapterBank
from engine.adapters.layers import Adapted
from engine.generation.core.prefill.interrupt import Checkpointed, LayerCheckpoints
from engine.kernels.modules import KernelLinear
from engine.layering import install, layers_of, only_kernels, uninstall
from engine.loading.model import load_generation_model

MIXINS = (KernelLinear, Adapted, Checkpointed)  # innermost to outermost
PROMPT = mx.array([[1, 17, 42, 99, 7, 300, 12, 5]])


@pytest.mark.parametrize("order", list(itertools.permutations(MIXINS)))
def test_mixins_stack_in_rank_order_whatever_the_install_order(order):
    layer = nn.Linear(4, 4)
    for mixin in order:
        install(layer, mixin)
    assert type(layer).__mro__[1:5] == (Checkpointed, Adapted, KernelLinear, nn.Linear)
    assert layers_of(layer) == (nn.Linear, (Checkpointed, Adapted, KernelLinear))
    for gone in order:
        uninstall(layer, gone)
        left = tuple(m for m in (Checkpointed, Adapted, KernelLinear) if m is not gone)
        assert layers_of(layer)[1] == left
        install(layer, gone)
    for mixin in MIXINS:
        uninstall(layer, mixin)
    assert type(layer) is nn.Linear and only_kernels(layer)


def test_only_kernels_tells_a_plain_layer_from_an_adapted_one():
    layer = nn.Linear(4, 4)
    install(layer, KernelLinear)
    assert only_kernels(layer)
    install(layer, Adapted)
    assert not only_kernels(layer)


@pytest.fixture(scope="module")
def logits(fixture_models, fixture_adapters):
    """The llama fixture's scores on one prompt, for each combination of kernels,
    the ``tone`` adapter and armed checkpoints, installed in both orders."""
    out = {}
    for use_kernels in (False, True):
        for adapter_first in (False, True):
            m = load_generation_model(fixture_models["llama"], use_kernels=use_kernels).model
            bank = AdapterBank(m, "llama")
            if adapter_first:
                key = bank.load("tone", fixture_adapters["tone"]).key
                checkpoints = LayerCheckpoints(m)
            else:
                checkpoints = LayerCheckpoints(m)
                key = bank.load("tone", fixture_adapters["tone"]).key
            for with_adapter, armed in itertools.product((False, True), repeat=2):
                with bank.routing.routed([key if with_adapter else ""]):
                    if armed:
                        with checkpoints.armed(lambda: False):
                            y = m(PROMPT)
                    else:
                        y = m(PROMPT)
                mx.eval(y)
                out[(use_kernels, adapter_first, with_adapter, armed)] = y
            assert checkpoints.layers_run == 2 * len(m.layers)
    return out


def test_checkpoints_change_nothing_they_run_around(logits):
    for (use_kernels, first, adapter, armed), y in logits.items():
        if armed:
            assert mx.array_equal(y, logits[(use_kernels, first, adapter, False)])


def test_the_install_order_changes_nothing(logits):
    for (use_kernels, first, adapter, armed), y in logits.items():
        assert mx.array_equal(y, logits[(use_kernels, not first, adapter, armed)])


def test_kernels_compute_what_mlx_computes_with_or_without_an_adapter(logits):
    for adapter in (False, True):
        plain, fast = logits[(False, False, adapter, False)], logits[(True, False, adapter, False)]
        assert mx.allclose(plain, fast, atol=1e-4, rtol=1e-4)


def test_the_adapter_changes_the_output_the_same_with_kernels(logits):
    for use_kernels in (False, True):
        base, adapted = logits[(use_kernels, False, False, False)], logits[(use_kernels, False, True, False)]
        assert not mx.allclose(base, adapted, atol=1e-3)
    if kernels.enabled():
        delta_plain = logits[(False, False, True, False)] - logits[(False, False, False, False)]
        delta_fast = logits[(True, False, True, False)] - logits[(True, False, False, False)]
        assert mx.allclose(delta_plain, delta_fast, atol=1e-4, rtol=1e-3)
