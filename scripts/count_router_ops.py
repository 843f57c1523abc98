"""Count the kernels and bytes of Megatron-Core's unfused router as the Nemotron-H family runs it.

The router of ``moe_router_fusion=False`` with a sigmoid score, an expert bias and the
sequence-level auxiliary loss (Megatron-Bridge ``nemotron_h_provider.py`` lines 48-52:
``moe_aux_loss_coeff=1e-4``, ``sigmoid``, ``moe_router_enable_expert_bias``,
``seq_aux_loss``, ``moe_router_dtype="fp32"``) and the performance recipes'
``moe_router_force_load_balancing`` (``RandomSTE``): ``TopKRouter.forward`` / ``routing``
(``router.py``) over ``topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
``switch_load_balancing_loss_func``, ``MoEAuxLossAutoScaler`` and the expert-bias count
(``moe_utils.py``), forward and backward, the functions taken from the Megatron-LM source
itself (``--megatron``: a checkout or ``git show d98e8a64:megatron/core/transformer/moe/
moe_utils.py``) and run on the CPU under torch's dispatch mode: each ATen op that is not a view
is a kernel moving its inputs and outputs. The tensor-parallel reduction of the token counts
is left out (one rank), as is the router GEMM (timed apart). The root gradient that
``backward()`` creates is not counted.

Run: ``python scripts/count_router_ops.py --megatron /path/to/moe_utils.py``; prints the
kernels and the bytes ``a r E + b r k`` of the forward and the backward (a fit over four
shapes), the figures :mod:`sim.compute.router_unfused` carries.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import math
import typing

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

KEEP = {"switch_load_balancing_loss_func", "MoEAuxLossAutoScaler", "topk_routing_with_score_function",
        "compute_routing_scores_for_aux_loss", "RandomSTE", "apply_random_logits", "group_limited_topk"}  # fmt: skip
VIEWS = {"view", "detach", "expand", "unsqueeze", "lift_fresh", "reshape", "_unsafe_view", "t",
         "transpose", "alias", "squeeze", "slice", "select", "as_strided"}  # fmt: skip


class _Tracker:
    def fork(self, _name):
        return contextlib.nullcontext()


def load(path: str) -> dict:
    """The router functions of Megatron-LM's ``moe_utils.py``, decorators dropped."""
    mod = ast.parse(open(path).read())
    body = [n for n in mod.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in KEEP]
    for n in body:
        n.decorator_list = []
    ns = {"torch": torch, "math": math, "HAVE_TE": False, "Optional": typing.Optional,
          "Tuple": tuple, "Union": typing.Union, "List": list,
          "get_cuda_rng_tracker": _Tracker, "get_expert_parallel_rng_tracker_name": lambda: "ep"}  # fmt: skip
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    return ns


class Count(TorchDispatchMode):
    """Kernels (non-view ATen ops) and the bytes of their inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.kernels, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ not in VIEWS:
            tensors = [
                a for a in tree_flatten((args, kwargs, out))[0] if isinstance(a, torch.Tensor)
            ]
            self.kernels += 1
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


def count(ns: dict, r: int, e: int, k: int) -> tuple[Count, Count]:
    """Forward and backward of one router call on ``r`` tokens, ``e`` experts, top-``k``."""
    torch.manual_seed(0)
    logits = torch.randn(r, e, dtype=torch.float32, requires_grad=True)
    with Count() as fwd:
        lg = ns["apply_random_logits"](logits)
        probs, rmap = ns["topk_routing_with_score_function"](
            lg, k, score_function="sigmoid", expert_bias=torch.zeros(e)
        )
        aux_map, scores = ns["compute_routing_scores_for_aux_loss"](lg, k, "sigmoid")
        aux = ns["switch_load_balancing_loss_func"](scores, aux_map.sum(dim=0), r, k, e, 1e-4)
        probs = ns["MoEAuxLossAutoScaler"].apply(probs, aux)
        with torch.no_grad():
            rmap.sum(dim=0)  # _apply_expert_bias
    grad = torch.ones_like(probs)
    with Count() as bwd:
        probs.backward(grad)
    return fwd, bwd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", required=True, help="Megatron-LM's moe_utils.py")
    ns = load(ap.parse_args().megatron)
    shapes = ((512, 512, 22), (512, 512, 6), (512, 256, 22), (1024, 128, 8))
    runs = [(s, *count(ns, *s)) for s in shapes]
    for phase in (1, 2):
        (r, e, k), (r2, _, k2) = shapes[0], shapes[1]
        c0, c1 = runs[0][phase], runs[1][phase]
        b = (c0.bytes / r - c1.bytes / r2) / (k - k2)  # per r*k
        a = (c0.bytes / r - b * k) / e  # per r*E
        name = "forward" if phase == 1 else "backward"
        print(f"{name}: {c0.kernels} kernels, {a:.1f} r E + {b:.1f} r k bytes")
        for (rr, ee, kk), *cs in runs:
            got = cs[phase - 1].bytes
            print(f"  r {rr} E {ee} k {kk}: {got} bytes, fit {a * rr * ee + b * rr * kk:.0f}")


if __name__ == "__main__":
    main()
