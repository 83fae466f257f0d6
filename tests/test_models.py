"""labkit.models: the seed CNN's bugs, the three fixes, shape traces, data, training, throughput."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from labkit.models.cnn import CNN, CNN64, CNN224, LazyCNN, SeedCNN, count_params
from labkit.models.data import digits_images, sequence_task, synthetic_images, train_test_split
from labkit.models.rnn_torch import TorchRNN
from labkit.models.throughput import throughput_by_batch
from labkit.models.trace import format_trace, trace_shapes
from labkit.models.train import train_classifier, train_torch_rnn


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)


# --------------------------------------------------------------------------- the seed CNN


def test_seed_cnn_raises_the_documented_error_at_224() -> None:
    with pytest.raises(
        RuntimeError, match=r"shape '\[-1, 32768\]' is invalid for input of size 401408"
    ):
        SeedCNN()(torch.randn(1, 3, 224, 224))


@pytest.mark.parametrize(("batch", "rows"), [(1, 4), (2, 8)])
def test_seed_cnn_silently_folds_128px_into_the_batch(batch: int, rows: int) -> None:
    assert SeedCNN()(torch.randn(batch, 3, 128, 128)).shape == (rows, 10)


def test_seed_cnn_is_right_only_at_64px_and_has_no_cuda_call() -> None:
    assert SeedCNN()(torch.randn(2, 3, 64, 64)).shape == (2, 10)
    assert SeedCNN().conv1.weight.device.type == "cpu"


# --------------------------------------------------------------------------- the fixes


def test_parameter_counts() -> None:
    assert count_params(SeedCNN().fc1) == 327_690
    assert count_params(CNN224().fc1) == 4_014_090
    assert count_params(SeedCNN()) == 328_586
    assert count_params(CNN64()) == 328_586
    assert count_params(CNN()) == 6_026
    lazy = LazyCNN()
    lazy(torch.randn(1, 3, 224, 224))
    assert count_params(lazy.fc1) == 4_014_090


@pytest.mark.parametrize("size", [224, 64, 97, 33, 2])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_cnn_is_size_agnostic(size: int, batch: int) -> None:
    if size == 224 and batch == 8:
        batch = 3  # keep the test fast; 8 × 224² adds nothing
    assert CNN()(torch.randn(batch, 3, size, size)).shape == (batch, 10)


def test_cnn_num_classes_and_validation() -> None:
    assert CNN(num_classes=3)(torch.randn(2, 3, 40, 40)).shape == (2, 3)
    with pytest.raises(ValueError, match="num_classes"):
        CNN(num_classes=0)


@pytest.mark.parametrize("batch", [1, 2])
def test_cnn224_works_only_at_224(batch: int) -> None:
    model = CNN224()
    assert model(torch.randn(batch, 3, 224, 224)).shape == (batch, 10)
    for size in (64, 128):
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            model(torch.randn(batch, 3, size, size))


@pytest.mark.parametrize("batch", [1, 2, 8])
def test_cnn64_works_at_64_and_fails_loudly_elsewhere(batch: int) -> None:
    model = CNN64()
    assert model(torch.randn(batch, 3, 64, 64)).shape == (batch, 10)
    for size in (128, 224, 32):  # 128 is the size the seed silently got wrong
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            model(torch.randn(batch, 3, size, size))


def test_models_follow_the_picked_device() -> None:
    from labkit import pick_device

    device = pick_device("torch")
    model = CNN().to(device).eval()
    x = torch.randn(2, 3, 64, 64, device=device)
    with torch.inference_mode():
        out = model(x)
    assert out.device.type == device.type and out.shape == (2, 10)
    rnn = TorchRNN().to(device)
    assert rnn(torch.randn(10, 20, 50, device=device)).device.type == device.type


# --------------------------------------------------------------------------- trace_shapes


def test_trace_of_seed_cnn_at_224_keeps_the_layers_and_the_error() -> None:
    trace = trace_shapes(SeedCNN(), torch.randn(1, 3, 224, 224))
    assert not trace.ok
    assert [row.name for row in trace] == ["conv1", "relu", "pool"]
    assert trace[-1].output_shape == (1, 32, 112, 112)
    assert "shape '[-1, 32768]' is invalid for input of size 401408" in trace.error
    assert trace.error.startswith("RuntimeError")
    assert "after 'pool'" in trace.failed_in
    text = format_trace(trace)
    assert "FAILED" in text and "401408" in text


def test_trace_of_seed_cnn_at_128_shows_the_fold() -> None:
    trace = trace_shapes(SeedCNN(), torch.randn(1, 3, 128, 128))
    assert trace.ok and trace.output_shape == (4, 10)
    assert trace[-1].input_shape == (4, 32768)


def test_trace_names_the_failing_layer() -> None:
    trace = trace_shapes(CNN64(), torch.randn(1, 3, 224, 224))
    assert trace.failed_in == "fc1" and "mat1 and mat2" in trace.error


@pytest.mark.parametrize(
    ("model", "size", "last_in", "params"),
    [
        (CNN, 97, (2, 512), 6_026),
        (CNN224, 224, (2, 401_408), 4_014_986),
        (CNN64, 64, (2, 32_768), 328_586),
    ],
)
def test_trace_of_fixes(model: type, size: int, last_in: tuple, params: int) -> None:
    trace = trace_shapes(model(), torch.randn(2, 3, size, size))
    assert trace.ok and trace.error is None and trace.output_shape == (2, 10)
    assert trace[-1].type == "Linear" and trace[-1].input_shape == last_in
    assert trace.total_params == params
    assert "output (2, 10)" in str(trace)


def test_trace_of_rnn_and_bad_arguments() -> None:
    trace = trace_shapes(TorchRNN(), torch.randn(10, 20, 50))
    assert trace[0].output_shape == ((10, 20, 50), (1, 10, 50))
    assert trace[0].params == 5_100


# --------------------------------------------------------------------------- data


def test_synthetic_images_shapes_and_determinism() -> None:
    x, y = synthetic_images(16, size=20, num_classes=4, seed=1)
    assert x.shape == (16, 3, 20, 20) and x.dtype == torch.float32
    assert y.shape == (16,) and y.dtype == torch.int64 and int(y.max()) < 4
    x2, y2 = synthetic_images(16, size=20, num_classes=4, seed=1)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    with pytest.raises(ValueError, match="size"):
        synthetic_images(4, size=1)


def test_digits_images_shapes() -> None:
    pytest.importorskip("sklearn")
    (xtr, ytr), (xte, yte) = digits_images(size=16, seed=0)
    assert xtr.shape[1:] == (3, 16, 16) and xtr.dtype == torch.float32
    assert ytr.dtype == torch.int64 and len(xtr) + len(xte) == 1797
    assert len(xte) == round(1797 * 0.25) and set(yte.tolist()) <= set(range(10))


def test_sequence_task_shapes() -> None:
    x, y = sequence_task(10, seed=0)
    assert x.shape == (10, 20, 50) and str(x.dtype) == "float32"
    assert y.shape == (10,) and str(y.dtype) == "int64"
    assert ((x[:, :, 0].sum(axis=1) > 0) == y).all()
    (a, b), (c, d) = train_test_split(x, y, test_fraction=0.3)
    assert len(a) == 7 and len(c) == 3


def test_data_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("labkit.models data tried to open a network connection")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    synthetic_images(4, size=8)
    sequence_task(4)
    if pytest.importorskip("sklearn"):
        digits_images(size=8)


# --------------------------------------------------------------------------- training


def test_train_classifier_learns_synthetic_images_deterministically() -> None:
    train = synthetic_images(256, size=16, num_classes=4, seed=0)
    test = synthetic_images(128, size=16, num_classes=4, seed=1)
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        results.append(
            train_classifier(
                CNN(num_classes=4), train, test, epochs=3, batch_size=32, lr=3e-3, device="cpu"
            )
        )
    first, second = results
    assert first.final_accuracy >= 0.8
    assert first.losses == second.losses and first.test_accuracies == second.test_accuracies
    assert first.losses[-1] < first.losses[0]
    assert len(first.epoch_seconds) == 3 and all(s > 0 for s in first.epoch_seconds)
    assert first.device == "cpu" and "test accuracy" in str(first)


def test_train_classifier_handles_lazy_layers_and_bad_arguments() -> None:
    train = synthetic_images(64, size=8, num_classes=2, seed=0)
    result = train_classifier(LazyCNN(num_classes=2), train, train, epochs=1, device="cpu")
    assert len(result.losses) == 1
    with pytest.raises(ValueError, match="epochs"):
        train_classifier(CNN(), train, train, epochs=0)
    with pytest.raises(ValueError, match="train: x and y must be non-empty and the same length"):
        train_classifier(CNN(), (train[0], train[1][:3]), train)


def test_train_torch_rnn_learns_the_sequence_task() -> None:
    x, y = sequence_task(800, steps=10, features=8, seed=0)
    train, test = train_test_split(x, y, seed=0)
    result = train_torch_rnn(train, test, hidden_size=16, epochs=6, device="cpu")
    assert result.final_accuracy >= 0.7  # chance is 0.5


# --------------------------------------------------------------------------- throughput


@pytest.mark.parametrize(
    "options",
    [{}, {"channels_last": True}, {"amp_dtype": torch.bfloat16}, {"inference": False}],
)
def test_throughput_by_batch_runs_on_cpu(options: dict) -> None:
    points = throughput_by_batch(CNN(), [2, 1], 16, device="cpu", warmup_ms=1, rep_ms=5, **options)
    assert [p.batch_size for p in points] == [1, 2]
    assert all(p.images_per_s > 0 and p.timing.n >= 5 for p in points)
    assert points[0].channels_last == options.get("channels_last", False)
    assert points[0].dtype == ("bfloat16" if "amp_dtype" in options else "float32")


def test_throughput_skips_batches_that_do_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import labkit.machine.memory

    monkeypatch.setattr(
        labkit.machine.memory, "available_bytes", lambda device="cpu": 4 * 1024 * 1024
    )
    with pytest.warns(UserWarning, match="skipped 1 batch size"):
        points = throughput_by_batch(CNN(), [1, 4096], 16, device="cpu", warmup_ms=0, rep_ms=1)
    assert [p.batch_size for p in points] == [1]


def test_throughput_validates_arguments() -> None:
    with pytest.raises(ValueError, match="batch_sizes"):
        throughput_by_batch(CNN(), [], 16)
    with pytest.raises(ValueError, match="image_size"):
        throughput_by_batch(CNN(), [1], 1)
    with pytest.raises(ValueError, match="amp_dtype"):  # autocast to "bf16" is refused
        throughput_by_batch(CNN(), [1], 16, amp_dtype="bf16")


# --------------------------------------------------------------------------- imports


def test_import_labkit_does_not_import_models_and_only_the_torch_modules_import_torch() -> None:
    code = (
        "import sys, labkit; assert 'labkit.models' not in sys.modules; "
        "import labkit.models, labkit.models.data, labkit.models.train, labkit.models.trace, "
        "labkit.models.throughput, labkit.models.rnn_keras, labkit.models.plots; "
        "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules; "
        "import labkit.models.cnn; assert 'torch' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_torch_is_a_missing_package_error() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n    import labkit.models.cnn\nexcept ImportError as e:\n"
        "    assert type(e).__name__ == 'MissingPackageError' and 'pip install torch' in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
