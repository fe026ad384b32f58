"""The batch on its own: steps of k >= 1 tokens per row (ragged), and rollback.

Reference: each row run alone through the model with its own fresh caches. Rows
of different lengths share the batch (left padding), which changes float32
rounding slightly, so scores are compared with a small tolerance and the chosen
ids exactly.
"""

from __future__ import annotations

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.models.cache import make_prompt_cache

from engine.generation.core.decode.batch import Batch
from engine.loading.traits import can_roll_back

PROMPTS = [[5, 17, 42, 99, 7, 300, 12, 8, 64, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150],
           [250, 3, 77], [11, 22, 33, 44, 55, 66]]  # the first is longer than the sliding window (16)
ATOL = 1e-3


@pytest.fixture(scope="module")
def models(fixture_models):
    return {kind: mlx_lm.load(str(fixture_models[kind]))[0] for kind in ("llama", "lfm2", "sliding")}


def _alone(model, tokens: list[int]) -> mx.array:
    """Scores [len, V] of ``tokens`` fed at once into fresh caches."""
    return model(mx.array(tokens)[None], cache=make_prompt_cache(model))[0]


def _joined(model, prompts) -> Batch:
    batch = Batch(model)
    for prompt in prompts:
        caches = make_prompt_cache(model)
        model(mx.array(prompt)[None], cache=caches)
        batch.join(caches)
    return batch


def _close(a: mx.array, b: mx.array) -> None:
    assert mx.allclose(a, b, atol=ATOL).item(), float(mx.abs(a - b).max())
    assert mx.array_equal(mx.argmax(a, axis=-1), mx.argmax(b, axis=-1)).item()


def test_which_models_roll_back(models):
    assert can_roll_back(models["llama"])
    assert not can_roll_back(models["sliding"])  # rotating window
    assert not can_roll_back(models["lfm2"])  # recurrent convolution state


@pytest.mark.parametrize("kind", ["llama", "lfm2", "sliding"])
def test_ragged_step_scores_every_fed_position(models, kind):
    model = models[kind]
    batch = _joined(model, PROMPTS)
    feeds = [[1, 2, 3], [4], [5, 6]]
    scores = batch.forward(feeds)
    assert scores.shape[:2] == (3, 3)
    for prompt, feed, row in zip(PROMPTS, feeds, scores):
        reference = _alone(model, prompt + feed)[len(prompt):]
        _close(row[: len(feed)], reference)
    # the padding left no trace: a plain step continues every row correctly
    after = batch.forward([[9], [9], [9]])
    for prompt, feed, row in zip(PROMPTS, feeds, after):
        _close(row[0], _alone(model, prompt + feed + [9])[-1])


def test_rollback_forgets_the_dropped_positions(models):
    model = models["llama"]
    batch = _joined(model, PROMPTS)
    drafts = [[70, 71, 72, 73], [80, 81, 82, 83], [90, 91, 92, 93]]
    batch.forward(drafts)
    kept = [1, 4, 0]  # row 0 keeps one draft, row 1 all four, row 2 none
    batch.rollback([len(d) - k for d, k in zip(drafts, kept)])
    after = batch.forward([[5], [6], [7]])
    for prompt, draft, k, nxt, row in zip(PROMPTS, drafts, kept, (5, 6, 7), after):
        _close(row[0], _alone(model, prompt + draft[:k] + [nxt])[-1])


def test_rollback_of_one_row_alone_is_a_trim(models):
    model = models["llama"]
    batch = _joined(model, PROMPTS[:1])
    batch.forward([[70, 71, 72]])
    batch.rollback([2])
    _close(batch.forward([[5]])[0, 0], _alone(model, PROMPTS[0] + [70, 5])[-1])
    assert batch.caches[0].left_padding.tolist() == [0]  # nothing rolled into padding


def test_rows_leave_and_join(models):
    model = models["llama"]
    batch = _joined(model, PROMPTS)
    batch.keep([2, 0])
    assert batch.size == 2
    scores = batch.forward([[9], [9]])
    _close(scores[0, 0], _alone(model, PROMPTS[2] + [9])[-1])
    _close(scores[1, 0], _alone(model, PROMPTS[0] + [9])[-1])
    extracted = batch.extract(1)
    assert extracted[0].offset == len(PROMPTS[0]) + 1
    batch.keep([])
    assert batch.size == 0 and batch.nbytes == 0


def test_bad_feeds_and_counts_are_refused(models):
    batch = _joined(models["llama"], PROMPTS[:2])
    with pytest.raises(ValueError):
        batch.forward([[1]])
    with pytest.raises(ValueError):
        batch.forward([[1], []])
    with pytest.raises(ValueError):
        batch.rollback([1])
    with pytest.raises(RuntimeError):
        _joined(models["lfm2"], PROMPTS[:2]).rollback([1, 0])


def test_ragged_step_then_rollback_drops_padding_and_drafts_together(models):
    model = models["llama"]
    batch = _joined(model, PROMPTS)
    feeds = [[70, 71, 72], [80], [90, 91]]
    batch.forward(feeds)
    batch.rollback([1, 0, 2])  # row 0 keeps 70 71, row 1 keeps 80, row 2 keeps nothing
    kept = [[70, 71], [80], []]
    after = batch.forward([[5], [6], [7]])
    for prompt, k, nxt, row in zip(PROMPTS, kept, (5, 6, 7), after):
        _close(row[0], _alone(model, prompt + k + [nxt])[-1])
