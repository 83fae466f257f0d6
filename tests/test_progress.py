from __future__ import annotations

import pytest

from labkit.core import progress


@pytest.mark.parametrize(
    ("value", "shown"), [("0", False), ("off", False), ("1", True), ("", True)]
)
def test_env_switch(monkeypatch: pytest.MonkeyPatch, value: str, shown: bool) -> None:
    monkeypatch.setenv(progress.ENV_VAR, value)
    assert progress.enabled() is shown


def test_iterates_every_item_with_and_without_a_bar(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress.progress(range(5), desc="sweep", show=False)) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    assert list(progress.progress(range(5), desc="sweep", show=True)) == [0, 1, 2, 3, 4]
