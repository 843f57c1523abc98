"""Count the host ops of one Megatron-Core GPT layer (dense or MoE) on the CPU.

The counts in ``sim/compute/mcore_ops.py`` come from this script. It needs megatron-core,
which pipesim does not depend on; install it beside the project and run:

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore python scripts/count_mcore_ops.py

For each configuration it builds a ``GPTModel`` (``get_gpt_layer_local_spec``, one rank over
gloo) with one and with two layers, runs a forward and a backward and prints, for the
difference (one layer): ATen ops in the forward and in the backward (a ``TorchDispatchMode``),
``nn.Module`` calls (a global forward pre-hook) and Python ``autograd.Function`` nodes of the
autograd graph. CPU-only changes: the CUDA RNG tracker's ``fork`` is a null context (no ATen
op), Megatron's global memory buffer lives on the CPU, megatron-core 0.15.0's missing
``te_general_gemm`` name is set to None. Not run by the tests.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.environ.get("MCORE", "/tmp/mcore"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29534"))
dist.init_process_group("gloo", rank=0, world_size=1)

from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tensor_parallel import random as mrandom  # noqa: E402
from megatron.core.transformer.moe import moe_utils  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

parallel_state.initialize_model_parallel(1, 1)
moe_utils.te_general_gemm = None


class _Tracker:
    def fork(self, name=None):
        return contextlib.nullcontext()

    def is_initialized(self):
        return True


mrandom.get_cuda_rng_tracker = lambda *a, **k: _Tracker()
tensor_parallel.get_cuda_rng_tracker = mrandom.get_cuda_rng_tracker


class Ops(TorchDispatchMode):
    """Counts the ATen ops dispatched below autograd."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


MODULE_CALLS = [0]
torch.nn.modules.module.register_module_forward_pre_hook(
    lambda m, a: MODULE_CALLS.__setitem__(0, MODULE_CALLS[0] + 1)
)


def python_nodes(t: torch.Tensor) -> int:
    """Python ``autograd.Function`` nodes of ``t``'s graph."""
    seen, stack, n = set(), [t.grad_fn], 0
    while stack:
        f = stack.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        n += hasattr(f, "_forward_cls")
        stack.extend(g for g, _ in f.next_functions)
    return n


def count(layers: int, experts: int | None, pe: str) -> dict[str, int]:
    """Counts of a ``layers``-layer model (``experts``: MoE with top-2 routing)."""
    torch.manual_seed(0)
    moe_utils.get_moe_layer_wise_logging_tracker().clear()
    moe = dict(
        num_moe_experts=experts,
        moe_router_topk=2,
        moe_token_dispatcher_type="allgather",
        moe_aux_loss_coeff=1e-2,
        moe_router_load_balancing_type="aux_loss",
        add_bias_linear=False,
    )
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
        **(moe if experts else {}),
    )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(num_experts=experts),
        vocab_size=128,
        max_sequence_length=32,
        position_embedding_type=pe,
    )
    b, s = 2, 32
    tokens = torch.randint(0, 128, (b, s))
    pos = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.ones(b, 1, s, s, dtype=torch.bool).triu(1)
    MODULE_CALLS[0] = 0
    with Ops() as fwd:
        loss = model(tokens, pos, mask, labels=torch.randint(0, 128, (b, s)))
    modules = MODULE_CALLS[0]
    total = loss.float().mean()
    functions = python_nodes(total)
    with Ops() as bwd:
        total.backward()
    return {
        "fwd_ops": sum(fwd.counts.values()),
        "bwd_ops": sum(bwd.counts.values()),
        "modules": modules,
        "functions": functions,
    }


def main() -> None:
    cases = [(None, "learned_absolute"), (None, "rope"), (2, "learned_absolute")]
    cases += [(4, "learned_absolute"), (8, "learned_absolute")]
    for experts, pe in cases:
        one, two = count(1, experts, pe), count(2, experts, pe)
        layer = {k: two[k] - one[k] for k in one}
        print(f"experts={experts} position={pe}: one layer {layer}")


if __name__ == "__main__":
    main()
