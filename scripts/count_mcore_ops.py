"""Count the host ops of one Megatron-Core GPT layer (dense or MoE) on the CPU.

The counts in ``sim/compute/mcore_ops.py`` come from this script. It needs megatron-core,
which pipesim does not depend on; install it beside the project and run:

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore python scripts/count_mcore_ops.py

For each configuration it builds a ``GPTModel`` (``get_gpt_layer_local_spec``, one rank over
gloo) with one and with two layers, runs a forward and a backward and prints, for the
difference (one layer): ATen ops in the forward and in the backward (a ``TorchDispatchMode``),
``nn.Module`` calls (a global forward pre-hook) and Python ``autograd.Function`` nodes of the
autograd graph. The set-up and its CPU-only changes: ``scripts/mcore_cpu.py``. Not run by the
tests.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from mcore_cpu import OpCounter, module_calls, moe_gpt, python_nodes, start  # noqa: E402

start("29534")


def count(layers: int, experts: int | None, pe: str) -> dict[str, int]:
    """Counts of a ``layers``-layer model (``experts``: MoE with top-2 routing,
    ``mcore_cpu.MOE``)."""
    model = moe_gpt(layers, experts, pe)
    b, s = 2, 32
    tokens = torch.randint(0, 128, (b, s))
    pos = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.ones(b, 1, s, s, dtype=torch.bool).triu(1)
    with module_calls() as calls, OpCounter() as fwd:
        loss = model(tokens, pos, mask, labels=torch.randint(0, 128, (b, s)))
    total = loss.float().mean()
    functions = python_nodes(total)
    with OpCounter() as bwd:
        total.backward()
    return {"fwd_ops": fwd.n, "bwd_ops": bwd.n, "modules": calls[0], "functions": functions}


def main() -> None:
    cases = [(None, "learned_absolute"), (None, "rope"), (2, "learned_absolute")]
    cases += [(4, "learned_absolute"), (8, "learned_absolute")]
    for experts, pe in cases:
        one, two = count(1, experts, pe), count(2, experts, pe)
        layer = {k: two[k] - one[k] for k in one}
        print(f"experts={experts} position={pe}: one layer {layer}")


if __name__ == "__main__":
    main()
