"""labkit.models RNNs: the article's Keras bug, Keras vs PyTorch shapes and parameter counts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.models import data, rnn_keras, rnn_torch

torch = pytest.importorskip("torch")


# --------------------------------------------------------------------------- PyTorch


def test_torch_rnn_shapes_and_params() -> None:
    model = rnn_torch.TorchRNN()
    assert sum(p.numel() for p in model.parameters()) == 5_100  # two bias vectors
    out, h_n = model.rnn(torch.randn(10, 20, 50))
    assert out.shape == (10, 20, 50) and h_n.shape == (1, 10, 50)
    assert model(torch.randn(10, 20, 50)).shape == (10, 20, 50)
    assert rnn_torch.TorchRNN(num_classes=2)(torch.randn(10, 20, 50)).shape == (10, 2)


def test_batch_first_trap_gives_the_same_output_shape() -> None:
    rnn = torch.nn.RNN(50, 50)  # default batch_first=False reads (10, 20, 50) as time=10, batch=20
    out, h_n = rnn(torch.randn(10, 20, 50))
    assert out.shape == (10, 20, 50)  # nothing errors ...
    assert h_n.shape == (1, 20, 50)  # ... only h_n gives it away


def test_h0_is_never_batch_first() -> None:
    rnn = rnn_torch.TorchRNN().rnn
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 10, 50\)"):
        rnn(torch.randn(10, 20, 50), torch.zeros(10, 1, 50))
    _, h_n = rnn(torch.randn(10, 20, 50), torch.zeros(1, 10, 50))
    assert h_n.shape == (1, 10, 50)


def test_torch_rnn_validates() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        rnn_torch.TorchRNN(hidden_size=0)


# --------------------------------------------------------------------------- Keras


@pytest.fixture(scope="module")
def tf():
    pytest.importorskip("tensorflow")
    from labkit.core.optional import import_tensorflow

    return import_tensorflow()


def test_seed_rnn_shapes_and_params(tf) -> None:
    model = rnn_keras.seed_rnn()
    assert type(model).__name__ == "RNN" and isinstance(model, tf.keras.Model)
    y = model(tf.random.normal([10, 20, 50]))
    assert tuple(y.shape) == (10, 20, 50)
    assert model.count_params() == 5_050  # one bias vector, against torch's 5,100


def test_seed_rnn_cuda_error_text(tf) -> None:
    assert rnn_keras.seed_rnn_calls_cuda() == "'RNN' object has no attribute 'cuda'"
    assert rnn_keras.seed_tensor_calls_cuda().endswith(
        "EagerTensor' object has no attribute 'cuda'"
    )


@pytest.mark.parametrize("kind", rnn_keras.KERAS_RNN_KINDS)
def test_keras_rnn_kinds(tf, kind: str) -> None:
    layer = rnn_keras.keras_rnn(kind, units=8)
    assert tuple(layer(tf.zeros([2, 5, 3])).shape) == (2, 5, 8)
    if kind.startswith("LSTM"):
        assert layer.use_cudnn == ("auto" if kind == "LSTM" else False)


def test_keras_return_state_and_sequences(tf) -> None:
    seq, state = rnn_keras.keras_rnn("SimpleRNN", 64, return_state=True)(tf.zeros([10, 20, 50]))
    assert tuple(seq.shape) == (10, 20, 64) and tuple(state.shape) == (10, 64)
    last = rnn_keras.keras_rnn("SimpleRNN", 50, return_sequences=False)(tf.zeros([10, 20, 50]))
    assert tuple(last.shape) == (10, 50)


def test_keras_rnn_validates() -> None:
    with pytest.raises(
        ValueError, match="kind must be one of 'SimpleRNN', 'LSTM', 'LSTM-no-cudnn'"
    ):
        rnn_keras.keras_rnn("Transformer")


def test_time_keras_rnns_runs(tf) -> None:
    timings = rnn_keras.time_keras_rnns(
        batch=2, steps=4, features=3, units=4, warmup_ms=0, rep_ms=1
    )
    kinds = ["SimpleRNN", "LSTM", "LSTM-no-cudnn"]
    assert [(t.kind, t.mode) for t in timings] == [
        (k, m) for k in kinds for m in ("eager", "graph")
    ]
    assert all(len(t.runs.runs) == 2 and t.median_ms > 0 for t in timings)
    gpu = bool(tf.config.list_physical_devices("GPU"))
    assert [t.uses_cudnn for t in timings if t.mode == "graph"] == [False, gpu, False]
    table = timings.table()
    assert "eager / graph, per round" in table and table.count("\n") == 3
    assert str(timings).startswith("[batch=2, steps=4, features=3], 4 units, forward pass on ")


def test_graph_op_types_finds_a_cudnn_op_without_running_it(tf) -> None:
    """Tracing builds the graph only, so a CudnnRNNV3 op can be checked for on a CPU."""

    @tf.function
    def fused(x, h, c, params):
        return tf.raw_ops.CudnnRNNV3(
            input=x, input_h=h, input_c=c, params=params, sequence_lengths=tf.constant([4, 4])
        )[0]

    spec = [tf.TensorSpec([4, 2, 3]), tf.TensorSpec([1, 2, 5]), tf.TensorSpec([1, 2, 5])]
    concrete = fused.get_concrete_function(*spec, tf.TensorSpec([None]))
    assert "CudnnRNNV3" in rnn_keras.graph_op_types(concrete)
    plain = tf.function(lambda x: tf.tanh(x)).get_concrete_function(tf.TensorSpec([2]))
    assert not any(t.startswith("CudnnRNN") for t in rnn_keras.graph_op_types(plain))


def test_time_keras_rnns_names_bad_modes(tf) -> None:
    with pytest.raises(ValueError, match="modes must be one of"):
        rnn_keras.time_keras_rnns(batch=2, steps=2, features=2, units=2, modes=("jit",))


def test_train_keras_rnn_learns_the_sequence_task(tf) -> None:
    x, y = data.sequence_task(600, steps=10, features=8, seed=0)
    train, test = data.train_test_split(x, y, seed=0)
    result = rnn_keras.train_keras_rnn(train, test, units=16, epochs=4, batch_size=32, lr=1e-2)
    assert result.framework == "tensorflow" and len(result.losses) == 4
    assert result.final_accuracy >= 0.7  # chance is 0.5


def test_missing_tensorflow_names_the_install_command() -> None:
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "from labkit.models import rnn_keras as m\n"
        "try:\n    m.seed_rnn()\nexcept ImportError as e:\n"
        "    assert type(e).__name__ == 'MissingPackageError' and 'pip install' in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
