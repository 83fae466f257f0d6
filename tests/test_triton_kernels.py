"""Notebook 12's Triton kernels: each against torch on random inputs and edge sizes.

Without a GPU they run in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); with one, compiled, on CUDA
tensors. The edge sizes are ones no block divides, and single elements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from labkit.cli.main import main  # noqa: E402
from labkit.core.optional import MissingPackageError  # noqa: E402
from labkit.triton_kernels import interp, launch, setup, verify  # noqa: E402


@pytest.fixture(scope="module")
def kit() -> launch.Kernels:
    return launch.load()


def _randn(kit: launch.Kernels, *shape: int, seed: int) -> Any:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(kit.device)


def test_every_table_case_matches_torch(kit: launch.Kernels) -> None:
    checks = verify.check_kernels(kit)
    assert {c.kernel for c in checks} == {"copy", "strided_copy", "softmax", "matmul"}
    assert len(checks) == 18
    bad = [c for c in checks if not c.ok]
    assert not bad, verify.checks_table(bad)
    # the outputs are not trivial: every element non-zero, as torch's
    assert all(c.nonzero == c.ref_nonzero > 0 and c.nan == 0 for c in checks)
    assert all(c.rel_err == 0 for c in checks if c.kernel in ("copy", "strided_copy"))


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 1023, 3001])
@pytest.mark.parametrize("block", [16, 64, 1024])
def test_copy_any_length_any_block(kit: launch.Kernels, n: int, block: int) -> None:
    x = _randn(kit, n, seed=n)
    assert torch.equal(kit.copy(x, block=block), x)


@pytest.mark.parametrize(("n", "stride"), [(12, 4), (1001, 7), (1000, 1000), (4096, 64)])
def test_strided_copy_is_the_transpose_of_the_view(
    kit: launch.Kernels, n: int, stride: int
) -> None:
    x = _randn(kit, n, seed=stride)
    expected = x.view(n // stride, stride).t().reshape(-1)
    assert torch.equal(kit.strided_copy(x, stride, block=32), expected)


@pytest.mark.parametrize(("rows", "cols"), [(1, 2), (5, 17), (2, 1024), (3, 1025)])
def test_softmax_rows_of_any_length(kit: launch.Kernels, rows: int, cols: int) -> None:
    x = _randn(kit, rows, cols, seed=cols) * 5
    out = kit.softmax(x)
    check = verify.compare("softmax", f"{rows} x {cols}", "", out, torch.softmax(x, dim=1))
    assert check.ok, check
    assert torch.allclose(out.sum(dim=1), torch.ones(rows, device=kit.device), atol=1e-5)


def test_softmax_does_not_overflow(kit: launch.Kernels) -> None:
    x = torch.tensor([[1000.0, 999.0, -1000.0]], device=kit.device)  # exp(1000) is inf in float32
    out = kit.softmax(x)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, torch.softmax(x, dim=1), rtol=1e-6)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (17, 33, 5), (40, 16, 48), (65, 100, 31)])
@pytest.mark.parametrize("blocks", [(16, 16, 16, 1), (32, 16, 32, 4)])
def test_matmul_shapes_no_tile_divides(
    kit: launch.Kernels, m: int, k: int, n: int, blocks: tuple[int, int, int, int]
) -> None:
    a, b = _randn(kit, m, k, seed=m), _randn(kit, k, n, seed=n)
    bm, bn, bk, group = blocks
    out = kit.matmul(a, b, block_m=bm, block_n=bn, block_k=bk, group_m=group)
    check = verify.compare("matmul", f"{m}x{k}@{k}x{n}", "", out, a.double() @ b.double())
    assert check.ok, check


def test_a_zero_or_unwritten_output_fails_the_check() -> None:
    ref = torch.randn(100)
    zeros = verify.compare("copy", "100", "", torch.zeros(100), ref)
    assert not zeros.ok and zeros.nonzero == 0 and zeros.ref_nonzero == 100
    half = ref.clone()
    half[50:] = float("nan")
    unwritten = verify.compare("copy", "100", "", half, ref)
    assert not unwritten.ok and unwritten.nan == 50
    assert "FAILED" in verify.checks_table([unwritten])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda k, x: k.copy(x, block=100), "block must be a power of two"),
        (lambda k, x: k.copy(x.double()), "x must be float32"),
        (lambda k, x: k.copy(x.view(10, 10)), "x must have 1 dimension"),
        (lambda k, x: k.copy(x[::2]), "x must be contiguous"),
        (lambda k, x: k.copy(x, out=torch.empty(3)), "out must be a torch.float32 tensor"),
        (lambda k, x: k.strided_copy(x, 7), "multiple of stride (7)"),
        (lambda k, x: k.strided_copy(x, 0), "stride must be a positive integer"),
        (lambda k, x: k.softmax(x), "x must have 2 dimension"),
        (lambda k, x: k.matmul(x.view(10, 10), x.view(20, 5)), "a's columns must equal b's rows"),
        (lambda k, x: k.matmul(x.view(10, 10), x.view(10, 10), block_k=8), "block_k must be"),
    ],
)
def test_bad_input_names_the_argument(kit: launch.Kernels, call: Any, message: str) -> None:
    x = torch.randn(100, device=kit.device)
    with pytest.raises(
        (ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        call(kit, x)


def test_tensors_on_the_wrong_device_are_refused(kit: launch.Kernels) -> None:
    if kit.device == "cpu":
        pytest.skip("needs a GPU: every tensor here is on the CPU")
    with pytest.raises(ValueError, match="x is on cpu, but these kernels run on cuda"):
        kit.copy(torch.randn(4))


def test_missing_triton_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(MissingPackageError, match=r"triton is not installed .*pip install"):
        setup.triton_setup()


def test_triton_imported_before_the_choice_is_explained() -> None:
    """Without a GPU, Triton imported before TRITON_INTERPRET=1 cannot run these kernels."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_INTERPRET", None)
    code = "import triton\nfrom labkit.triton_kernels import launch\nlaunch.load()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert (
        "restart the kernel" in result.stderr and "before anything imports Triton" in result.stderr
    )


def test_the_setup_says_where_the_kernels_run(kit: launch.Kernels) -> None:
    assert setup.kernels_interpreted(kit.module) == kit.setup.interpreted
    assert str(kit.setup).startswith(f"Triton {kit.setup.version}: ")
    assert kit.device == ("cpu" if kit.setup.interpreted else "cuda")


# --------------------------------------------------------------------------- the interpreter's cost


def test_the_interpreter_costs_time_per_program(kit: launch.Kernels) -> None:
    if not kit.setup.interpreted:
        pytest.skip("the kernels are compiled here")
    sweep = interp.program_sweep(kit, n=1 << 14, blocks=(16, 4096), rounds=2, rep_ms=5.0)
    assert sweep.programs == (1024, 4)
    # 1,024 programs against 4: far apart, whatever the load
    assert sweep.median_ms[0] > 10 * sweep.median_ms[1]
    assert sweep.per_program_us() > 0
    assert "per program" in str(sweep)


def test_the_interpreter_is_slower_than_torch(kit: launch.Kernels) -> None:
    if not kit.setup.interpreted:
        pytest.skip("the kernels are compiled here")
    # one torch thread: beside another test process, two would oversubscribe the cores and
    # slow torch's side by orders of magnitude (see the Makefile's note on strict nbval)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = interp.interpreter_times(kit, rounds=2, rep_ms=5.0)
    finally:
        torch.set_num_threads(threads)
    assert [t.kernel for t in times] == ["copy", "strided_copy", "softmax", "matmul"]
    assert all(t.ratio > 10 for t in times), interp.interpreter_table(times)
    assert "interpreter / torch" in interp.interpreter_table(times)


# --------------------------------------------------------------------------- Inductor, the CLI


def test_inductor_writes_one_fused_kernel(kit: launch.Kernels) -> None:
    from labkit.triton_kernels.inductor import generated_code

    code = generated_code(kit.device)
    assert len(code.kernels) == 1
    if kit.device == "cpu":
        assert code.language == "C++" and "softmax" in code.kernels[0]
        assert 'extern "C"' in code.kernel_source()
    else:
        assert code.language == "Triton" and code.kernel_source().startswith("@triton.jit")


def test_bench_quick_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "triton", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "triton" and data["failed"] == []
    assert len(data["checks"]) == 18 and all(c["ok"] for c in data["checks"])
    assert data["inductor"]["kernels"]
    assert data["summary"][-1].startswith("(--quick")


def test_importing_the_modules_imports_no_triton() -> None:
    code = (
        "import labkit.cli.bench.triton, labkit.triton_kernels.launch, sys\n"
        "print('triton' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- what the checks catch


def test_a_store_without_its_mask_is_caught_outside_the_output(kit: launch.Kernels) -> None:
    """The interpreter does not bounds-check a store: only the guard around the output sees it."""
    import triton
    import triton.language as tl

    if setup.triton_imported_interpreted() is False and kit.setup.interpreted:
        pytest.skip("Triton was imported for the GPU in this process")

    @triton.jit
    def unmasked_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(y_ptr + offsets, x)  # no mask: the last block writes past the end

    x = _randn(kit, 100, seed=1)
    buffer, out = verify.guarded_output((100,), kit.device)
    unmasked_copy[(1,)](x, out, 100, BLOCK=128)
    check = verify.compare("copy", "100", "128", out, x, outside=verify.outside_writes(buffer, out))
    assert check.outside_writes == 28 and not check.ok
    assert check.rel_err == 0 and check.nan == 0  # inside the output, all is well


def test_exercise_checks() -> None:
    from labkit import check

    assert check.triton_grid(40, 240)
    assert not check.triton_grid(39, 240) and "round the division up" in str(
        check.triton_grid(39, 0)
    )
    assert not check.triton_grid(40, 0)
    assert check.tile_reuse(32) and not check.tile_reuse(1024) and not check.tile_reuse(4096)
    assert "every program" in str(check.tile_reuse(1024))
    assert check.interpreter_time(512 * 0.4, 400.0, n=65_536, block=128)
    assert "microseconds" in str(check.interpreter_time(512 * 400.0, 400.0, n=65_536, block=128))
    assert not check.triton_grid(None, None).passed and not check.tile_reuse(...).passed


def test_out_must_be_contiguous_and_apart_from_x(kit: launch.Kernels) -> None:
    x = torch.randn(100, device=kit.device)
    with pytest.raises(ValueError, match="out must be contiguous"):
        kit.copy(x, out=torch.empty(200, device=kit.device)[::2])
    with pytest.raises(ValueError, match="out must not overlap the input"):
        kit.copy(x, out=x)
