"""Megatron-Core on one CPU process: the set-up that ``count_mcore_ops.py``,
``time_mcore_layer.py``, ``time_mcore_moe_layer.py`` and ``count_moe_router_region.py`` share,
with the MoE configuration they count and time in (:data:`MOE`, :func:`moe_gpt`).

Importing this module puts the repository root and ``$MCORE`` (default ``/tmp/mcore``, where
``pip install --target /tmp/mcore --no-deps megatron-core==0.15.0`` puts megatron-core) on
``sys.path`` and imports megatron-core; nothing else happens until :func:`start` is called.

CPU-only changes that :func:`start` makes (each because megatron-core 0.15.0 assumes CUDA):
``torch.cuda.current_device`` answers ``"cpu"`` (Megatron's global memory buffer lives on the
CPU); the CUDA RNG tracker's ``fork`` is a null context (no ATen op); the missing
``moe_utils.te_general_gemm`` name is set to None. Not run by the tests.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

warnings.filterwarnings("ignore")
sys.path.insert(0, os.environ.get("MCORE", "/tmp/mcore"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tensor_parallel import random as mrandom  # noqa: E402
from megatron.core.transformer.moe import moe_utils  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from backends.torch.profile.host_overhead import measure_host_overhead  # noqa: E402
from sim.hardware.host_ops import HostOverhead  # noqa: E402

__all__ = [
    "MOE",
    "GPTModel",
    "OpCounter",
    "cpu_host_overhead",
    "describe_host",
    "modelled_s",
    "module_calls",
    "moe_gpt",
    "python_nodes",
    "start",
    "tiny_gpt",
]

MOE: dict[str, Any] = dict(
    moe_router_topk=2,
    moe_token_dispatcher_type="allgather",
    moe_aux_loss_coeff=1e-2,
    moe_router_load_balancing_type="aux_loss",
    add_bias_linear=False,
)
"""The MoE config fields of the counting configuration: top-2 routing with the auxiliary
load-balancing loss, the ``allgather`` token dispatcher (the ``alltoall`` one builds a CUDA
stream at construction), no linear biases."""


class _Tracker:
    def fork(self, name: str | None = None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_initialized(self) -> bool:
        return True


def start(port: str) -> None:
    """One gloo rank on ``127.0.0.1:port`` (``$MASTER_PORT`` wins), model parallel 1 x 1, and
    the CPU-only changes of the module doc."""
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    moe_utils.te_general_gemm = None
    mrandom.get_cuda_rng_tracker = lambda *a, **k: _Tracker()
    tensor_parallel.get_cuda_rng_tracker = mrandom.get_cuda_rng_tracker


def tiny_gpt(layers: int, experts: int | None = None, pe: str = "learned_absolute",
             **moe: Any) -> GPTModel:  # fmt: skip
    """A ``layers``-layer GPT of hidden 64, 4 heads, FFN 256, vocabulary 128, 32 positions,
    ``get_gpt_layer_local_spec`` (``experts``: MoE layers with ``moe``'s config fields), every
    fusion off so that each op runs as plain torch."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        num_layers=layers,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=256,
        hidden_dropout=0.1,
        attention_dropout=0.1,
        use_cpu_initialization=True,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
        bias_activation_fusion=False,
        persist_layer_norm=False,
        **(dict(num_moe_experts=experts, **moe) if experts else {}),
    )
    return GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(num_experts=experts),
        vocab_size=128,
        max_sequence_length=32,
        position_embedding_type=pe,
    )


def moe_gpt(layers: int, experts: int | None, pe: str = "learned_absolute") -> GPTModel:
    """:func:`tiny_gpt` with ``experts`` local experts and :data:`MOE`'s fields (``experts``
    0 or None: the dense model), built after clearing megatron-core's MoE logging tracker
    (each MoE layer's forward adds its auxiliary loss to it)."""
    moe_utils.get_moe_layer_wise_logging_tracker().clear()
    return tiny_gpt(layers, experts or None, pe, **MOE)


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched below autograd while it is entered: ``n`` in all,
    ``counts`` by op name."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.n += 1
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def module_calls() -> Iterator[list[int]]:
    """``nn.Module`` calls while entered, in the one-element list it yields (a global forward
    pre-hook, removed on exit: it slows every module call)."""
    calls = [0]
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a: calls.__setitem__(0, calls[0] + 1)
    )
    try:
        yield calls
    finally:
        hook.remove()


def python_nodes(t: torch.Tensor) -> int:
    """Python ``autograd.Function`` nodes of ``t``'s autograd graph."""
    seen, stack, n = set(), [t.grad_fn], 0
    while stack:
        f = stack.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        n += hasattr(f, "_forward_cls")
        stack.extend(g for g, _ in f.next_functions)
    return n


def cpu_host_overhead(rounds: int) -> HostOverhead:
    """This CPU's host figures as ``sim calibrate`` measures them
    (:func:`backends.torch.profile.host_overhead.measure_host_overhead`, 9 repetitions), each
    the smallest over ``rounds`` calibrations (other processes only add time), as a
    :class:`sim.hardware.host_ops.HostOverhead` (seconds)."""
    cals = [measure_host_overhead(torch.device("cpu"), reps=9) for _ in range(rounds)]
    return HostOverhead(
        op_s=min(c["op_s"] for c in cals),
        backward_op_s=min(c["backward_op_s"] for c in cals),
        module_s=min(c["python"]["module_s"] for c in cals),
        function_s=min(c["python"]["function_s"] for c in cals),
        function_backward_s=min(c["python"]["function_backward_s"] for c in cals),
    )


def describe_host(host: HostOverhead) -> str:
    """One line of ``host``'s figures in microseconds, with torch's version."""
    us = 1e6
    return (f"torch {torch.__version__}; this CPU (sim calibrate): op {host.op_s * us:.2f} us, "
            f"backward op {host.backward_op_s * us:.2f}, module {host.module_s * us:.2f}, "
            f"function {host.function_s * us:.2f}, function backward "
            f"{host.function_backward_s * us:.2f}")  # fmt: skip


def modelled_s(host: HostOverhead, fwd_ops: float, bwd_ops: float, modules: float,
               functions: float) -> tuple[float, float]:  # fmt: skip
    """Forward and backward host seconds that pipesim charges for ``fwd_ops`` and ``bwd_ops``
    ATen ops, ``modules`` module calls and ``functions`` Function nodes at ``host``'s
    figures (:meth:`~sim.hardware.host_ops.HostOverhead.forward_s`, ``backward_s``,
    ``calls_s``)."""
    fwd_s = host.forward_s(fwd_ops) + host.calls_s(modules, functions)
    return fwd_s, host.backward_s(bwd_ops) + host.calls_s(modules, functions, backward=True)
