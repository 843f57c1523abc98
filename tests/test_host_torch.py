"""What the host must issue, counted and measured with torch: op counts of a known tiny model,
the trace columns a profile writes, and the shape of calibrate's host-cost measurement."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from backends.torch.profile.host_overhead import (  # noqa: E402
    host_overhead_yaml,
    measure_host_overhead,
)
from backends.torch.profile.op_count import count_ops, layer_calls, layer_ops  # noqa: E402
from sim.hardware.host_spec import HostOverheadSpec  # noqa: E402


def test_op_counts_of_relu_of_a_linear_layer():
    # Forward of relu(Linear(4, 3)(x)) on a [2, 4] input, autograd recording: F.linear with a
    # bias on a 2-D input is t + addmm; relu; autograd saves relu's output as a detached
    # alias (detach): 4 ops. Without recording the detach is gone: 3.
    # Backward with the parameters already holding gradients: ReluBackward0 unpacks its saved
    # output (detach) and runs threshold_backward; AddmmBackward0: the input's gradient
    # grad @ W (t of the saved t(W), mm) and the weight's (t of x, mm, t back), the bias's sum
    # and its view to [3]; TBackward0: t; three AccumulateGrad add_ (x, W, b): 13 ops.
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)

    def fn(h):
        return torch.relu(lin(h))

    layer_ops(fn, x)  # first backward: the gradients come into existence
    xg = x.detach().requires_grad_(True)
    xg.grad = torch.zeros_like(xg)
    y = fn(xg)
    y.backward(torch.ones_like(y))  # x holds a gradient too, so that all three accumulate
    assert count_ops(lambda: fn(xg)) == 4
    with torch.no_grad():
        assert count_ops(lambda: fn(xg)) == 3
    y = fn(xg)
    g = torch.ones_like(y)
    assert count_ops(lambda: y.backward(g)) == 13


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        return x * 2

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        return g * 2


class _Block(torch.nn.Module):
    """Linear, then LayerNorm, then a custom Function applied twice, then GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.norm, self.act = (
            torch.nn.Linear(4, 4),
            torch.nn.LayerNorm(4),
            torch.nn.GELU(),
        )

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.act(_Double.apply(_Double.apply(self.norm(self.lin(x)))))


def test_layer_calls_count_modules_and_function_applies():
    # The block's own call and its three children: 4 module calls; two applies of _Double:
    # 2 Function nodes. A lambda around the block counts the same (the hook sees module
    # calls, not the callable); a bare tensor op makes neither.
    block, x = _Block(), torch.randn(2, 4)
    assert layer_calls(block, x) == (4, 2)
    assert layer_calls(lambda h: block(h) + 1, x) == (4, 2)
    assert layer_calls(lambda h: h * 3, x) == (0, 0)


def test_profile_records_the_ops_of_each_layer():
    from backends.torch.models.transformer import as_spec, build_layers
    from backends.torch.profile.layers import profile_model

    spec = dict(name="mini", kind="gpt", layers=1, hidden=32, heads=2, seq_len=8, vocab=64)
    t = profile_model(spec, microbatch_size=1, reps=1, warmup=0)
    block = build_layers(as_spec(spec), 0)[1]
    x = torch.randn(1, 8, 32)
    layer_ops(block, x)  # gradients exist, as after the profiler's timed runs
    assert (t.layers[1].fwd_ops, t.layers[1].bwd_ops) == tuple(
        float(n) for n in layer_ops(block, x)
    )
    assert all(layer.fwd_ops and layer.bwd_ops for layer in t.layers[1:])
    # the block's module calls are recorded (nn.TransformerEncoderLayer and its children)
    assert t.layers[1].fwd_modules == float(layer_calls(block, x)[0]) > 1
    assert t.layers[1].fwd_functions == 0.0


def test_calibrate_host_measurement_shape():
    m = measure_host_overhead(torch.device("cpu"), reps=1, inner=2)
    for key in ("op_s", "nograd_op_s", "backward_op_s"):  # measured, finite (no timing bound)
        assert 0 < m[key] < float("inf"), key
    assert m["checkpoint_s"] >= 0
    assert 0 < m["nograd_ops"] <= m["fwd_ops"] < m["bwd_ops"]
    assert 0 < m["primitive"]["nograd_s"] and 0 < m["primitive"]["grad_s"]
    entry = host_overhead_yaml(m, "test cpu", "1970-01-01")
    host = HostOverheadSpec.model_validate(entry).overhead()
    assert host.op_s == pytest.approx(m["op_s"], rel=1e-3)
    assert host.backward_op_s == pytest.approx(m["backward_op_s"], rel=1e-3)
    assert host.cpu == "test cpu" and "tiny GPT block" in host.source
    # Python's per-call costs are measured and written beside the per-op ones
    assert m["modules"] > 0 and 0 < m["python"]["module_s"] < 1e-3
    assert host.function_s == pytest.approx(m["python"]["function_s"], rel=1e-3)
    assert host.function_backward_s == pytest.approx(m["python"]["function_backward_s"], rel=1e-3)
