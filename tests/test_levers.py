"""labkit.models.levers: the CNN's training step with the levers added one at a time."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from labkit.models import levers  # noqa: E402

TINY: dict[str, Any] = {"batch": 2, "image_size": 8, "rounds": 2, "rep_ms": 1.0, "device": "cpu"}
NO_COMPILE = [name for name in levers.LEVERS if name != "torch.compile"]


def test_labels_add_one_lever_each_in_order() -> None:
    labels = levers.config_labels()
    assert labels[0] == levers.BEFORE
    assert labels[1:] == tuple(f"+ {name}" for name in levers.LEVERS)
    assert levers.LEVERS[-1] == "bfloat16 autocast"


@pytest.mark.parametrize("bad", [[], ["fp8"], ["channels_last", "cuda graphs"]])
def test_unknown_levers_are_named(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="levers must name at least one of 'no .item"):
        levers.apply_levers(levers=bad, **TINY)


@pytest.mark.parametrize(("arg", "value"), [("batch", 0), ("image_size", 2), ("steps", 0)])
def test_bad_sizes_name_the_argument(arg: str, value: int) -> None:
    with pytest.raises(ValueError, match=arg):
        levers.apply_levers(**{**TINY, arg: value})


def test_a_run_without_compile_times_each_configuration() -> None:
    result = levers.apply_levers(levers=NO_COMPILE, **TINY)
    labels = levers.config_labels(tuple(NO_COMPILE))
    assert result.runs.labels == labels
    assert [step.label for step in result.steps()] == list(labels[1:])
    assert result.first_call_s == {}  # nothing compiled
    base = result.first_loss[levers.BEFORE]
    # the same weights and batch: float32 configurations agree; bfloat16 is close, not equal
    assert result.first_loss["+ channels_last"] == pytest.approx(base, rel=1e-4)
    assert result.first_loss["+ bfloat16 autocast"] == pytest.approx(base, rel=5e-2)
    diff = result.output_difference
    assert diff is not None and diff[levers.BEFORE] == 0.0
    assert 0 < diff["+ bfloat16 autocast"] < 0.1  # bfloat16's rounding, not a different model
    assert "logits vs before" in str(result) and "reference" in str(result)
    text = str(result)
    assert text.splitlines()[0].startswith("course CNN training step")
    assert "first call of each compiled" not in text
    assert any(line.startswith("every lever here against before: ") for line in result.verdicts())
    record = result.to_dict()
    assert [c["label"] for c in record["configurations"]] == list(labels)
    assert result.summary()[0].startswith("course CNN training step, batch 2, 8×8, on cpu")


def test_the_compiled_configurations_report_their_first_call(monkeypatch: Any) -> None:
    compiled: list[Any] = []

    def fake_compile(model: Any) -> Any:
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    result = levers.apply_levers(levers=["torch.compile", "bfloat16 autocast"], **TINY)
    assert len(compiled) == 2  # each compiled configuration has its own model
    assert set(result.first_call_s) == {"+ torch.compile", "+ bfloat16 autocast"}
    assert "first call of each compiled configuration" in str(result)


def step(low: float, high: float) -> levers.LeverStep:
    return levers.LeverStep("+ x", 1.0, (low + high) / 2, low, high, 0.0)


@pytest.mark.parametrize(
    ("low", "high", "word"),
    [
        (1.2, 1.5, "faster by more than 10% in every round"),
        (0.5, 0.8, "slower by more than 10% in every round"),
        (1.02, 1.05, "no change beyond 10%"),  # two rounds that agree by a few percent
        (0.7, 1.3, "no change beyond 10%"),
    ],
)
def test_a_lever_is_judged_only_beyond_the_band(low: float, high: float, word: str) -> None:
    assert word in step(low, high).verdict()


def test_the_sizes_follow_the_device_unless_given() -> None:
    assert levers.SIZES["gpu"] == (64, 224) and levers.SIZES["cpu"] == (16, 64)
    quick = levers.apply_levers("cpu", quick=True, levers=NO_COMPILE)
    assert (quick.batch, quick.image_size) == levers.SIZES["quick"] and quick.quick
    assert quick.summary()[-1].startswith("(--quick") and str(quick).endswith("mean little)")
    given = levers.apply_levers(levers=["channels_last"], **TINY)
    assert (given.batch, given.image_size, given.quick) == (2, 8, False)
    assert not given.summary()[-1].startswith("(--quick")


def test_quick_leaves_the_compile_out(monkeypatch: Any) -> None:
    monkeypatch.setattr(torch, "compile", lambda model: pytest.fail("compiled in --quick"))
    result = levers.apply_levers("cpu", quick=True)
    assert "+ torch.compile" not in result.runs.labels and result.first_call_s == {}
