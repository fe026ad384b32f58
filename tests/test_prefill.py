"""Prefill planner: hand-derived tables of the plan, error cases,
properties, and (when ``node`` is on PATH) a differential check against the
seed function itself."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.generation.core.prefill.steps import PrefillStep, StepKind, next_prefill_step


def plan_prefill(length: int, chunk_size: int, tail_split: bool, snapshot_at: int | None = None,
                 start: int = 0) -> list[PrefillStep]:
    """Every step from ``start`` up to and including the final one."""
    steps: list[PrefillStep] = []
    position = start
    while True:
        steps.append(next_prefill_step(length, position, chunk_size, tail_split, snapshot_at))
        if steps[-1].kind is StepKind.FINAL:
            return steps
        position = steps[-1].end


def compact(steps: list[PrefillStep]) -> list[tuple]:
    """(start, end, kind, snapshot) with short spellings."""
    return [(s.start, s.end, s.kind.value[0], s.snapshot) for s in steps]


# (length, chunk, tail_split, snapshot_at, start) -> steps as
# (start, end, "d"rain/"f"inal, snapshot); derived by hand.
PLANS = [
    pytest.param(10, 4, False, None, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 10, "f", False)],
                 id="10/4-plain"),
    pytest.param(10, 4, True, None, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 9, "d", False),
                  (9, 10, "f", False)],
                 id="10/4-tailsplit"),
    pytest.param(8, 4, False, None, 0,
                 [(0, 4, "d", False), (4, 8, "f", False)], id="8/4-plain-exact"),
    pytest.param(9, 4, True, None, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 9, "f", False)],
                 id="9/4-tailsplit-last-drain-whole"),
    pytest.param(7, 4, True, None, 0,
                 [(0, 4, "d", False), (4, 6, "d", False), (6, 7, "f", False)],
                 id="7/4-tailsplit-short-tail"),
    pytest.param(5, 100, True, None, 0,
                 [(0, 4, "d", False), (4, 5, "f", False)], id="5/100-tailsplit"),
    pytest.param(5, 100, False, None, 0, [(0, 5, "f", False)], id="5/100-plain"),
    pytest.param(2, 4, False, None, 0, [(0, 2, "f", False)], id="2/4-plain"),
    pytest.param(2, 4, True, None, 0,
                 [(0, 1, "d", False), (1, 2, "f", False)], id="2/4-tailsplit"),
    pytest.param(1, 4, False, None, 0, [(0, 1, "f", False)], id="length1-plain"),
    pytest.param(1, 4, True, None, 0, [(0, 1, "f", False)], id="length1-tailsplit"),
    pytest.param(1, 1, False, None, 0, [(0, 1, "f", False)], id="length1-chunk1"),
    pytest.param(3, 1, False, None, 0,
                 [(0, 1, "d", False), (1, 2, "d", False), (2, 3, "f", False)],
                 id="chunk1-plain"),
    pytest.param(3, 1, True, None, 0,
                 [(0, 1, "d", False), (1, 2, "d", False), (2, 3, "f", False)],
                 id="chunk1-tailsplit"),
    pytest.param(10, 4, True, None, 9, [(9, 10, "f", False)], id="position-length-1-tailsplit"),
    pytest.param(10, 4, False, None, 9, [(9, 10, "f", False)], id="position-length-1-plain"),
    pytest.param(10, 4, False, None, 3,
                 [(3, 7, "d", False), (7, 10, "f", False)], id="start3-plain"),
    # Snapshot strictly inside: cut at the boundary, flagged.
    pytest.param(10, 4, False, 6, 0,
                 [(0, 4, "d", False), (4, 6, "d", True), (6, 10, "f", False)],
                 id="snap6-short-cut"),
    pytest.param(10, 4, False, 8, 0,
                 [(0, 4, "d", False), (4, 8, "d", True), (8, 10, "f", False)],
                 id="snap8-on-chunk-boundary"),
    pytest.param(10, 4, True, 9, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 9, "d", True),
                  (9, 10, "f", False)],
                 id="snap9-tailsplit-last-drain-yields"),
    pytest.param(5, 4, True, 4, 0,
                 [(0, 4, "d", True), (4, 5, "f", False)], id="snap4-tailsplit"),
    pytest.param(10, 4, False, 1, 0,
                 [(0, 1, "d", True), (1, 5, "d", False), (5, 9, "d", False),
                  (9, 10, "f", False)],
                 id="snap1-decode-cut"),
    pytest.param(6, 4, True, 3, 0,
                 [(0, 3, "d", True), (3, 5, "d", False), (5, 6, "f", False)],
                 id="snap3-tailsplit"),
    # Boundaries at/before the position or at the length are ignored.
    pytest.param(10, 4, False, 4, 4,
                 [(4, 8, "d", False), (8, 10, "f", False)], id="snap-at-position"),
    pytest.param(10, 4, False, 2, 4,
                 [(4, 8, "d", False), (8, 10, "f", False)], id="snap-before-position"),
    pytest.param(10, 4, False, 0, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 10, "f", False)],
                 id="snap-zero"),
    pytest.param(10, 4, False, 10, 0,
                 [(0, 4, "d", False), (4, 8, "d", False), (8, 10, "f", False)],
                 id="snap-at-length"),
]


@pytest.mark.parametrize(("length", "chunk", "tail_split", "snapshot_at", "start", "expected"), PLANS)
def test_plan_table(length: int, chunk: int, tail_split: bool, snapshot_at: int | None, start: int,
                    expected: list[tuple]) -> None:
    assert compact(plan_prefill(length, chunk, tail_split, snapshot_at, start)) == expected


def test_single_step_matches_plan_and_fields() -> None:
    step = next_prefill_step(10, 8, 4, True)
    assert step == PrefillStep(8, 9, StepKind.DRAIN, False)
    assert step.size == 1
    assert step.kind == "drain"  # str enums compare to plain strings
    with pytest.raises(AttributeError):
        step.start = 0  # type: ignore[misc]



POSITION_ERRORS = [
    pytest.param(10, 10, 4, id="position==length"),
    pytest.param(10, 11, 4, id="position>length"),
    pytest.param(0, 0, 4, id="empty"),
    pytest.param(10, -1, 4, id="negative-position"),
    pytest.param(10, 0, 0, id="chunk0"),
    pytest.param(10, 0, -3, id="chunk-negative"),
    pytest.param(10, 1.0, 4, id="float-position"),
    pytest.param(10, 0, 4.0, id="float-chunk"),
    pytest.param(10.0, 0, 4, id="float-length"),
    pytest.param(10, 0.5, 4, id="fractional-position"),
    pytest.param(10, True, 4, id="bool-position"),
    pytest.param(10, 0, True, id="bool-chunk"),
    pytest.param(True, 0, 4, id="bool-length"),
    pytest.param(10, "0", 4, id="str-position"),
    pytest.param(10, None, 4, id="none-position"),
    pytest.param(2**53, 0, 4, id="unsafe-length"),
    pytest.param(2**53 + 5, 2**53 + 1, 4, id="unsafe-position"),
    pytest.param(10, 0, 2**53, id="unsafe-chunk"),
    pytest.param(float("nan"), 0, 4, id="nan-length"),
    pytest.param(float("inf"), 0, 4, id="inf-length"),
]


@pytest.mark.parametrize(("length", "position", "chunk"), POSITION_ERRORS)
@pytest.mark.parametrize("snapshot_at", [None, 5, -1])
def test_invalid_position_or_chunk(length: object, position: object, chunk: object, snapshot_at: int | None) -> None:
    # Position/chunk validation comes first, even with a bad snapshot boundary.
    with pytest.raises(ValueError, match=r"^invalid prefill position or chunk size$"):
        next_prefill_step(length, position, chunk, False, snapshot_at)  # type: ignore[arg-type]


@pytest.mark.parametrize("snapshot_at", [11, -1, 5.0, 5.5, True, False, "5", 2**53])
def test_invalid_snapshot_boundary(snapshot_at: object) -> None:
    with pytest.raises(ValueError, match=r"^invalid prefill snapshot boundary$"):
        next_prefill_step(10, 0, 4, True, snapshot_at)  # type: ignore[arg-type]


def test_snapshot_validated_even_when_ignored() -> None:
    # Out-of-range boundaries are errors even though in-range ones behind the position are ignored.
    with pytest.raises(ValueError, match="snapshot"):
        next_prefill_step(10, 9, 4, False, 11)
    assert next_prefill_step(10, 9, 4, False, 3).kind is StepKind.FINAL


def test_safe_integer_limits_accepted() -> None:
    big = 2**53 - 1
    assert next_prefill_step(big, big - 1, big, False) == PrefillStep(big - 1, big, StepKind.FINAL, False)
    assert next_prefill_step(big, 0, 4, False, big).end == 4


def test_plan_rejects_empty_range() -> None:
    with pytest.raises(ValueError):
        plan_prefill(5, 4, False, start=5)



# ---------------------------------------------------------------- properties

plan_inputs = st.integers(1, 300).flatmap(
    lambda length: st.tuples(
        st.just(length),
        st.integers(0, length - 1),  # start
        st.integers(1, 64),  # chunk
        st.booleans(),  # tail_split
        st.none() | st.integers(0, length),  # snapshot_at
    )
)


@settings(max_examples=800, deadline=None)
@given(plan_inputs)
def test_plan_properties(args: tuple[int, int, int, bool, int | None]) -> None:
    length, start, chunk, tail_split, snapshot_at = args
    steps = plan_prefill(length, chunk, tail_split, snapshot_at, start)

    # Contiguous cover of [start, length), exactly one final step, at the end.
    assert steps[0].start == start and steps[-1].end == length
    assert all(a.end == b.start for a, b in zip(steps, steps[1:]))
    assert [s.kind for s in steps] == [StepKind.DRAIN] * (len(steps) - 1) + [StepKind.FINAL]

    # Each step is non-empty and at most one chunk.
    for s in steps:
        assert 1 <= s.size <= chunk
        assert s == next_prefill_step(length, s.start, chunk, tail_split, snapshot_at)

    final = steps[-1]
    assert final.snapshot is False
    if tail_split:
        assert final.size == 1
    else:
        # Without snapshot influence the final step holds what is left after whole chunks.
        assert 1 <= final.size <= chunk

    # Snapshot: exactly one step ends at an interior boundary; none otherwise.
    inside = snapshot_at is not None and start < snapshot_at < length
    snaps = [s for s in steps if s.snapshot]
    if inside:
        assert len(snaps) == 1 and snaps[0].end == snapshot_at and snaps[0].kind is StepKind.DRAIN
        # Up to the boundary: whole chunks, then one cut piece (possibly whole).
        before = [s for s in steps if s.end <= snapshot_at]
        assert all(s.size == chunk for s in before[:-1])
    else:
        assert snaps == []

    # After the boundary (or without one) the cut is canonical: whole chunks,
    # then the remainder (tail_split: the remainder minus one, then one position).
    rest_from = snapshot_at if inside else start
    rest = [s.size for s in steps if s.start >= rest_from]  # type: ignore[operator]
    n = length - rest_from  # type: ignore[operator]
    if tail_split:
        body = n - 1
        expected_sizes = [chunk] * (body // chunk) + ([body % chunk] if body % chunk else []) + [1]
    else:
        expected_sizes = [chunk] * ((n - 1) // chunk) + [n - (n - 1) // chunk * chunk]
    assert rest == expected_sizes


# ------------------------------------------------- differential check vs the seed

SEED_JS = r"""
function prefillPhase(start, end, whole) {
  return end - start === 1 ? "decode" : whole ? "chunk" : "tail";
}
function nextPrefillStep(input) {
  const { length, position, chunkSize, tailSplit, snapshotAt } = input;
  if (!Number.isSafeInteger(length) || !Number.isSafeInteger(position) ||
      !Number.isSafeInteger(chunkSize) || chunkSize < 1 || position < 0 || position >= length)
    throw new Error("invalid prefill position or chunk size");
  if (snapshotAt != null && (!Number.isSafeInteger(snapshotAt) || snapshotAt < 0 || snapshotAt > length))
    throw new Error("invalid prefill snapshot boundary");
  if (snapshotAt != null && snapshotAt > position && snapshotAt < length) {
    const whole = position + chunkSize <= snapshotAt;
    const end = whole ? position + chunkSize : snapshotAt;
    return { start: position, end, kind: "drain", snapshot: end === snapshotAt, batchYield: true,
      phase: prefillPhase(position, end, whole) };
  }
  const remaining = length - position;
  if (remaining > (tailSplit ? 1 : chunkSize)) {
    const whole = !tailSplit || chunkSize <= remaining - 1;
    const end = position + (whole ? chunkSize : remaining - 1);
    return { start: position, end, kind: "drain", snapshot: false,
      batchYield: !tailSplit || remaining - 1 > chunkSize, phase: prefillPhase(position, end, whole) };
  }
  return { start: position, end: length, kind: "final", snapshot: false, batchYield: false,
    phase: prefillPhase(position, length, remaining === chunkSize) };
}
const inputs = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = inputs.map((input) => {
  try { return nextPrefillStep(input); } catch (e) { return { error: e.message }; }
});
process.stdout.write(JSON.stringify(out));
"""


def _random_inputs(rng: random.Random, count: int) -> list[dict]:
    """Mostly valid positions, plus values both sides reject (JSON-representable
    ones only: integral floats like 4.0 parse as integers in JS, so they are
    left out; the Python port rejects them by design)."""
    odd = [True, False, 0.5, -2.5, "3", 2**53, -(2**53), -1, 0]
    cases = []
    for _ in range(count):
        length = rng.choice([1, 2, 3, rng.randint(1, 40), rng.randint(1, 5000), 2**53 - 1])
        position = rng.randint(0, length - 1) if rng.random() < 0.9 else rng.randint(-2, length + 2)
        chunk = rng.choice([1, 2, rng.randint(1, 16), rng.randint(1, 600), length, length - 1, length + 1])
        snap = None if rng.random() < 0.4 else rng.choice(
            [position, position + 1, position + chunk, position + chunk - 1, length, length - 1,
             rng.randint(-1, length + 1)])
        case = {"length": length, "position": position, "chunkSize": chunk,
                "tailSplit": rng.random() < 0.5, "snapshotAt": snap}
        if rng.random() < 0.05:
            case[rng.choice(["length", "position", "chunkSize", "snapshotAt"])] = rng.choice(odd)
        cases.append(case)
    return cases


def _python_step(case: dict) -> dict:
    try:
        s = next_prefill_step(case["length"], case["position"], case["chunkSize"], case["tailSplit"],
                              case["snapshotAt"])
    except ValueError as e:
        return {"error": str(e)}
    return {"start": s.start, "end": s.end, "kind": s.kind.value, "snapshot": s.snapshot}


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
def test_matches_seed_under_node() -> None:
    cases = _random_inputs(random.Random(20240607), 20_000)
    proc = subprocess.run([shutil.which("node") or "node", "-e", SEED_JS], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=120, check=True)
    fields = ("start", "end", "kind", "snapshot", "error")  # the port keeps what the engine uses
    js = [{k: v for k, v in r.items() if k in fields} for r in json.loads(proc.stdout)]
    assert len(js) == len(cases)
    mismatches = [(c, j, p) for c, j in zip(cases, js) if (p := _python_step(c)) != j]
    assert not mismatches, mismatches[:5]
    # The sample exercises every outcome.
    outcomes = {(r.get("kind"), r.get("snapshot"), r["end"] - r["start"] == 1) for r in js if "error" not in r}
    assert len(outcomes) >= 5
    assert {r["error"] for r in js if "error" in r} == {"invalid prefill position or chunk size",
                                                         "invalid prefill snapshot boundary"}
