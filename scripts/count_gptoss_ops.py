"""Count the host ops of GPT-OSS's eager pieces of a Megatron-Core layer on the CPU.

The counts in ``sim/compute/gptoss_host.py`` come from this script. It needs megatron-core,
which pipesim does not depend on; install it beside the project and run:

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore python scripts/count_gptoss_ops.py

It calls Megatron-Core's own functions (the ones a GPT-OSS layer runs eagerly where other
models run a fused kernel or nothing) under a ``TorchDispatchMode`` and prints the ATen ops of
each in the forward and in the backward (the gradient given, so the count is the function's
own backward):

* ``_apply_rotary_pos_emb_bshd`` on the query ``[s, b, 64, 64]`` and the key ``[s, b, 8, 64]``
  with YaRN's ``mscale`` (TE's fused RoPE takes no scale: ``rope_utils.apply_rotary_pos_emb``);
* ``weighted_bias_quick_geglu_impl`` with ``clamp_value`` 7 less the same without it (the clamp
  of the two halves and their concatenation);
* ``TEGroupedMLP._apply_bias`` with 2 and 4 local experts (the down projection's bias,
  weighted by the routing probabilities, one add per expert);
* the unfused bias-dropout-add with the attention projection's bias less without one (GPT-OSS
  sets ``bias_dropout_fusion = False`` and ``add_bias_linear = True``).

The set-up and its CPU-only changes: ``scripts/mcore_cpu.py``. Not run by the tests.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from mcore_cpu import OpCounter, start  # noqa: E402
from megatron.core.fusions import fused_bias_geglu  # noqa: E402
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add  # noqa: E402
from megatron.core.models.common.embeddings.rope_utils import (  # noqa: E402
    _apply_rotary_pos_emb_bshd,
)
from megatron.core.transformer.moe.experts import TEGroupedMLP  # noqa: E402

start("29535")
MSCALE = 0.1 * torch.log(torch.tensor(32.0)).item() + 1.0  # YaRN concentration at factor 32


def _eager(fn):  # type: ignore[no-untyped-def]
    """The Python function under a ``jit_fuser`` (torch.compile / torch.jit.script)."""
    return getattr(fn, "_torchdynamo_orig_callable", None) or getattr(fn, "__wrapped__", fn)


for name in ("weighted_quick_geglu", "weighted_quick_geglu_back", "weighted_bias_quick_geglu",
             "weighted_bias_quick_geglu_back", "quick_gelu"):  # fmt: skip
    if hasattr(fused_bias_geglu, name):
        setattr(fused_bias_geglu, name, _eager(getattr(fused_bias_geglu, name)))


def count(fn, *inputs: torch.Tensor) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """ATen ops of ``fn(*inputs)`` forward and of its backward: the gradient given and taken
    with respect to the inputs (non-leaf tensors, as a layer's are), so that neither making the
    output's gradient nor accumulating into leaves is counted."""
    leaves = [x.detach().requires_grad_() for x in inputs]
    xs = [x.clone() for x in leaves]
    with OpCounter() as fwd:
        y = fn(*xs)
    grad = torch.ones_like(y)
    with OpCounter() as bwd:
        torch.autograd.grad(y, xs, grad, allow_unused=True)
    return fwd.n, bwd.n


def main() -> None:
    s, b, hd = 32, 2, 64
    freqs = torch.rand(s, 1, 1, hd)
    bf16 = dict(dtype=torch.bfloat16)  # activations and parameters; freqs and probs fp32
    q, k = torch.rand(s, b, 64, hd, **bf16), torch.rand(s, b, 8, hd, **bf16)
    rope = [count(lambda t: _apply_rotary_pos_emb_bshd(t, freqs, mscale=MSCALE), t) for t in (q, k)]
    print(f"rope (query, key) with mscale {MSCALE:.3f}: {rope}")

    n, f = 64, 16
    x, p = torch.rand(n, 2 * f, **bf16), torch.rand(n, 1)
    impl = fused_bias_geglu.weighted_bias_quick_geglu_impl
    clamp = count(lambda a, w: impl(a, None, w, False, 1.0, 7.0), x, p)
    plain = count(lambda a, w: impl(a, None, w, False, 1.0, None), x, p)
    print(f"quick-GeGLU with clamp {clamp}, without {plain}")

    for experts in (2, 4):
        out, probs = torch.rand(n, f, **bf16), torch.rand(n, 1)
        biases = [torch.rand(f, **bf16) for _ in range(experts)]
        split = [n // experts] * experts
        ops = count(lambda o, w, *bs, sp=split: TEGroupedMLP._apply_bias(o, list(bs), sp, w),
                    out, probs, *biases)  # fmt: skip
        print(f"_apply_bias with {experts} local experts: {ops}")

    bda = get_bias_dropout_add(True, False)
    h, res, bias = (torch.rand(s, b, f, **bf16), torch.rand(s, b, f, **bf16),
                    torch.rand(f, **bf16))  # fmt: skip
    with_bias = count(lambda a, r, c: bda((a, c), r, 0.0), h, res, bias)
    no_bias = count(lambda a, r: bda((a, None), r, 0.0), h, res)
    print(f"bias-dropout-add unfused with bias {with_bias}, without {no_bias}")


if __name__ == "__main__":
    main()
