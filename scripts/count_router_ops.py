"""Count the kernels and bytes of Megatron-Core's unfused router, per router configuration.

The router of ``moe_router_fusion=False`` (Megatron-Core's default, ``transformer_config.py``
line 944): ``TopKRouter.forward`` / ``routing`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/router.py`` lines 746-870) over ``RandomSTE``
(``moe_router_force_load_balancing``), ``topk_routing_with_score_function``,
``compute_routing_scores_for_aux_loss``, ``switch_load_balancing_loss_func``,
``MoEAuxLossAutoScaler`` and the expert-bias count (``moe_utils.py``), forward and backward,
the functions taken from the Megatron-LM source itself (``--megatron``: ``git show
d98e8a64:megatron/core/transformer/moe/moe_utils.py``) and run on the CPU under torch's
dispatch mode: each ATen op that is not a view is a kernel moving its inputs and outputs.

A configuration (:data:`CONFIGS`) is the score function (``softmax``, Megatron's default, or
``sigmoid``), the expert bias (``moe_router_enable_expert_bias``), the balancing loss
(``none``; ``aux``: ``aux_loss`` or ``seq_aux_loss``, one op sequence at one sequence per
micro-batch, ``router.py`` lines 410-505; ``global``: ``global_aux_loss``, lines 507-551, which
adds the running counts' ``+=``, ``ga_steps += 1`` and their division), forced balance
(``RandomSTE``) and the router dtype (``fp32``: ``moe_router_dtype="fp32"``, logits in fp32;
else the model's bf16, ``router.py`` lines 105-110). The Nemotron-H family's is ``sigmoid``,
bias, ``aux`` (``seq_aux_loss``), forced balance, fp32 (Megatron-Bridge v0.4.1
``nemotron_h_provider.py`` lines 48-52 and the performance recipes).

Left out, as the Nemotron-H count always left them out (its figures stay those the model
carries): the tensor-parallel reduction of the token counts (one rank); the router GEMM (timed
apart); the root gradient that ``backward()`` creates; the metrics tracker's two scalar kernels
per loss (``aux_loss / coeff`` and ``values[layer] += ...``: ``router.py`` lines 599-605,
``moe_logging.py`` lines 94-127) and ``seq_aux_loss``'s scalar ``/ bsz`` (line 492);
token dropping of ``moe_expert_capacity_factor`` (``apply_router_token_dropping``, ``router.py``
lines 790-799); ``sinkhorn`` routing (a data-dependent loop, ``moe_utils.py`` lines 185-207).

Options counted as deltas over a configuration (``--flags``, :data:`FLAGS`; the lines of
:data:`sim.compute.router_unfused.FLAG_COUNTED`), each the difference of the counts with and
without it, fitted as ``a r E + b r k + c r`` over three of :data:`FLAG_SHAPES` and checked at
the other two: ``scale``, ``--moe-router-topk-scaling-factor`` (``probs * scaling_factor``,
``moe_utils.py`` lines 933-934); ``deterministic``, ``--deterministic-mode``
(``torch.use_deterministic_algorithms(True)``: ``index_put_`` maps in place of the two
``scatter``, lines 941-951); ``groupsG/g``, ``--moe-router-num-groups G --moe-router-group-topk
g`` (``group_limited_topk``, lines 673-727), per counted ``(G, g)`` (:data:`GROUPS`). The script
checks that neither the balancing loss nor forced balance changes a delta, so one entry per
score function, expert bias and dtype; the options touch disjoint lines of
``topk_routing_with_score_function``, so their deltas add.

Run: ``python scripts/count_router_ops.py --megatron /path/to/moe_utils.py [--table] [--flags]``;
prints per configuration the kernels and the bytes ``a r E + b r k`` of the forward and the
backward (a fit over two shapes, checked at two more), or with ``--table`` the lines of
:data:`sim.compute.router_unfused.COUNTED`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import itertools
import math
import typing

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

KEEP = {"switch_load_balancing_loss_func", "MoEAuxLossAutoScaler", "topk_routing_with_score_function",
        "compute_routing_scores_for_aux_loss", "RandomSTE", "apply_random_logits", "group_limited_topk"}  # fmt: skip
VIEWS = {"view", "detach", "expand", "unsqueeze", "lift_fresh", "reshape", "_unsafe_view", "t",
         "transpose", "alias", "squeeze", "slice", "select", "as_strided"}  # fmt: skip
SHAPES = ((512, 512, 22), (512, 512, 6), (512, 256, 22), (1024, 128, 8))
CONFIGS = tuple(itertools.product(("softmax", "sigmoid"), (False, True), ("none", "aux"),
                                  (False, True), (False, True)))  # fmt: skip
"""``(score, expert bias, loss, forced balance, fp32)``: the table's configurations."""
NEMOTRON_H = ("sigmoid", True, "aux", True, True)
GROUPS = {"groups8/4": (8, 4), "groups4/2": (4, 2)}
"""Group-limited top-k's ``(num_groups, group_topk)`` counted: DeepSeek-V3's 8 groups, top-4
(arXiv:2412.19437 §4.2; the golden DeepSeek-V3 proxy's command line) and the Megatron-FSDP
DeepSeek proxy test's 4, top-2."""
FLAGS = ("scale", "deterministic", *GROUPS)
"""The options counted as deltas over a configuration (module doc)."""
FLAG_SHAPES = ((512, 512, 8), (512, 256, 8), (1024, 512, 16), (1024, 128, 8), (512, 512, 16))
"""Shapes whose ``k`` every group top-k divides (``topk // group_topk`` exact)."""


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
          "is_batch_invariant_mode_enabled": lambda: False,
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


def _aux(ns: dict, lg, probs, r: int, e: int, k: int, score: str, loss: str, state: dict):
    """``routing``'s loss branch (``router.py`` lines 804-833) on one rank."""
    aux_map, scores = ns["compute_routing_scores_for_aux_loss"](lg, k, score)
    tokens = aux_map.sum(dim=0)  # get_tokens_per_expert_and_token_count, moe_utils.py l. 278
    if loss == "global":  # _apply_global_aux_loss, router.py lines 529-531
        state["tokens"] += tokens
        state["steps"] += 1
        tokens = state["tokens"] / state["steps"]
    aux = ns["switch_load_balancing_loss_func"](scores, tokens, r, k, e, 1e-4)
    return ns["MoEAuxLossAutoScaler"].apply(probs, aux)


def count(ns: dict, r: int, e: int, k: int, cfg: tuple, flag: str = "") -> tuple[Count, Count]:
    """Forward and backward of one router call on ``r`` tokens, ``e`` experts, top-``k``;
    ``flag``: ``""``, one of :data:`FLAGS` or several joined by ``+`` (module doc)."""
    score, bias, loss, forced, fp32 = cfg
    torch.manual_seed(0)
    dtype = torch.float32 if fp32 else torch.bfloat16
    logits = torch.randn(r, e, dtype=dtype, requires_grad=True)
    state = {"tokens": torch.zeros(e), "steps": torch.zeros((), dtype=torch.long)}
    on = set(flag.split("+"))  # several: "scale+groups8/4" (their deltas add: module doc)
    opts = {"scaling_factor": 2.5} if "scale" in on else {}  # --moe-router-topk-scaling-factor
    for g in on & set(GROUPS):  # --moe-router-num-groups G --moe-router-group-topk g
        opts["num_groups"], opts["group_topk"] = GROUPS[g]
    torch.use_deterministic_algorithms("deterministic" in on)  # --deterministic-mode
    with Count() as fwd:
        lg = ns["apply_random_logits"](logits) if forced else logits
        probs, rmap = ns["topk_routing_with_score_function"](
            lg, k, score_function=score, expert_bias=torch.zeros(e) if bias else None, **opts
        )
        if loss != "none":
            probs = _aux(ns, lg, probs, r, e, k, score, loss, state)
        if bias:
            with torch.no_grad():
                rmap.sum(dim=0)  # _apply_expert_bias
    grad = torch.ones_like(probs)
    with Count() as bwd:
        probs.backward(grad)
    torch.use_deterministic_algorithms(False)
    return fwd, bwd


def fit(ns: dict, cfg: tuple) -> list[tuple[int, float, float, list]]:
    """``[(kernels, a, b, [(shape, counted, fitted)...])]`` of the forward and the backward."""
    runs = [(s, *count(ns, *s, cfg)) for s in SHAPES]
    out = []
    for phase in (1, 2):
        (r, e, k), (r2, _, k2) = SHAPES[0], SHAPES[1]
        c0, c1 = runs[0][phase], runs[1][phase]
        b = (c0.bytes / r - c1.bytes / r2) / (k - k2)  # per r*k
        a = (c0.bytes / r - b * k) / e  # per r*E
        checks = [(s, cs[phase - 1].bytes, a * s[0] * s[1] + b * s[0] * s[2]) for s, *cs in runs]
        out.append((c0.kernels, a, b, checks))
    return out


def fit_delta(ns: dict, cfg: tuple, flag: str) -> list[tuple[int, float, float, float, float]]:
    """``flag``'s kernels and bytes over ``cfg``'s, ``a r E + b r k + c r``, forward and
    backward: ``[(kernels, a, b, c, worst relative error of the fit at the other shapes)]``."""
    runs = []
    for r, e, k in FLAG_SHAPES:
        base, on = count(ns, r, e, k, cfg), count(ns, r, e, k, cfg, flag)
        deltas = [(o.kernels - b.kernels, o.bytes - b.bytes) for b, o in zip(base, on, strict=True)]
        runs.append(((r, e, k), deltas))
    out = []
    for phase in (0, 1):
        rows = torch.tensor([[r * e, r * k, r] for (r, e, k), _ in runs[:3]], dtype=torch.float64)
        ys = torch.tensor([d[phase][1] for _, d in runs[:3]], dtype=torch.float64)
        a, b, c = torch.linalg.solve(rows, ys).tolist()
        worst = max(abs(d[phase][1] - (a * r * e + b * r * k + c * r)) / max(abs(d[phase][1]), 1)
                    for (r, e, k), d in runs)  # fmt: skip
        kernels = {d[phase][0] for _, d in runs}
        assert len(kernels) == 1, (flag, cfg, kernels)
        out.append((kernels.pop(), a, b, c, worst))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", required=True, help="Megatron-LM's moe_utils.py")
    ap.add_argument("--table", action="store_true", help="print router_unfused.COUNTED's lines")
    ap.add_argument("--global-loss", action="store_true", help="also count global_aux_loss")
    ap.add_argument("--flags", action="store_true", help="count FLAGS (FLAG_COUNTED's lines)")
    args = ap.parse_args()
    ns = load(args.megatron)
    if args.flags:
        return flag_table(ns, args.table)
    configs = CONFIGS
    if args.global_loss:
        configs += tuple(c[:2] + ("global",) + c[3:] for c in CONFIGS if c[2] == "aux")
    for cfg in configs:
        (nf, af, bf, cf), (nb, ab, bb, cb) = fit(ns, cfg)
        if args.table:
            print(f"    {cfg!r}: (({nf}, {af:.1f}, {bf:.1f}), ({nb}, {ab:.1f}, {bb:.1f})),")
            continue
        print(f"{cfg}{'  (Nemotron-H)' if cfg == NEMOTRON_H else ''}")
        for name, n, a, b, checks in (("forward", nf, af, bf, cf), ("backward", nb, ab, bb, cb)):
            worst = max(abs(got / want - 1) for _, got, want in checks)
            print(f"  {name}: {n} kernels, {a:.1f} r E + {b:.1f} r k bytes (worst fit {worst:.2%})")


def check_additive(ns: dict, cfg: tuple, shape: tuple = (512, 256, 8)) -> None:
    """That the options together add what each adds alone (module doc), kernels and bytes."""
    flags = ("scale", "deterministic", "groups8/4")
    base, both = count(ns, *shape, cfg), count(ns, *shape, cfg, "+".join(flags))
    alone = [count(ns, *shape, cfg, f) for f in flags]
    for ph in (0, 1):
        kernels = sum(a[ph].kernels - base[ph].kernels for a in alone)
        nbytes = sum(a[ph].bytes - base[ph].bytes for a in alone)
        got = (both[ph].kernels - base[ph].kernels, both[ph].bytes - base[ph].bytes)
        assert got == (kernels, nbytes), (cfg, ph, got, kernels, nbytes)


def flag_table(ns: dict, table: bool) -> None:
    """Each flag's delta per configuration, keyed by what it depends on: the script checks that
    the balancing loss and forced balance do not change it (one entry per score, bias, dtype)."""
    for cfg in CONFIGS:
        check_additive(ns, cfg)
    for flag in FLAGS:
        for score, bias, fp32 in itertools.product(("softmax", "sigmoid"), (False, True),
                                                   (False, True)):  # fmt: skip
            got = {c[2:4]: fit_delta(ns, c, flag) for c in CONFIGS
                   if (c[0], c[1], c[4]) == (score, bias, fp32)}  # fmt: skip
            first = next(iter(got.values()))
            for other in got.values():
                for p, q in zip(first, other, strict=True):
                    close = (abs(x - y) < 0.05 for x, y in zip(p[1:4], q[1:4], strict=True))
                    same = p[0] == q[0] and all(close)
                    assert same, (flag, score, bias, fp32, got)
            key = (flag, score, bias, fp32)
            (nf, *fwd, wf), (nb, *bwd, wb) = ((n, *(f"{round(x, 1) + 0.0:.1f}" for x in abc), w)
                                              for n, *abc, w in first)  # fmt: skip
            if table:
                print(f"    {key!r}: (({nf}, {', '.join(fwd)}), ({nb}, {', '.join(bwd)})),")
            else:
                print(
                    f"{key}: forward {nf} kernels, a b c = {fwd} (worst {wf:.2%}); "
                    f"backward {nb} kernels, {bwd} (worst {wb:.2%})"
                )


if __name__ == "__main__":
    main()
