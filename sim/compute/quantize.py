"""A layer's kernels under a low-precision recipe: its linear GEMMs in FP8/MXFP8/NVFP4 and the
quantize kernels that feed them (:mod:`sim.compute.precision` says which and why).

:func:`quantize_layer` takes a layer's ``(forward, input gradient, weight gradient)`` kernels as
:mod:`sim.compute.decoder` builds them and returns them as the recipe runs them:

* the linear layers' GEMMs (``qkv``/``q``/``k``/``v``, ``proj``, ``gate``, ``up``, ``down``, MLA's
  ``q_down``/``q_up``/``kv_down``/``kv_up``, the shared and routed experts; the output layer
  and the router where :class:`~sim.compute.precision_rules.LayerRules` say so) get the format
  (:attr:`Kernel.precision`) and the bytes of quantized operands and a 16-bit output:
  ``(m*k + k*n) * q + m*n*2`` per GEMM; the weight-gradient GEMMs only when the recipe runs
  them low (``Recipe.wgrad``);
* a quantize kernel per operand (module doc of :mod:`sim.compute.precision`): each layer input
  in the forward (both usages when the weight gradient is low), each output gradient in the
  input-gradient phase, and, where the library keeps no weight cache (torchao), each weight in
  the forward (row-wise) and in the input-gradient phase (column-wise). GEMMs that share an
  input share its cast (Megatron's fused QKV and FC1 linears). The inputs of a dense block's
  QKV and FC1 come from the norm of a ``LayerNormLinear``: with ``norm_fusion == "cast"`` the
  norm writes the quantized copies instead of its 16-bit output (its bytes change, no kernel
  is added), with ``"amax"`` the cast kernel has no amax pass. Under sequence parallelism a
  norm's output is quantized before the all-gather, over the rank's own tokens (the norm's:
  :data:`NORM_INPUT`).

A quantization config's ``mxfp8`` matchers (:attr:`LayerRules.mxfp8`; Megatron-Bridge's Nemotron
3 NVFP4 ``te_quant.cfg`` runs Mamba's ``'*mixer.out_proj'`` in MXFP8, NVIDIA-NeMo/Megatron-Bridge
@067f987df0 ``src/megatron/bridge/perf_recipes/nemotronh/te_quant.cfg``) take those linears out of
the run's recipe and give them MXFP8's GEMMs and casts (a second pass with TE's MXFP8 recipe over
those names only, at the GPU's MXFP8 rate).

Under TE's NVFP4 recipe each NVFP4 GEMM is preceded by a single-thread kernel that folds the
operands' per-tensor scales into its ``alpha`` (one per expert in ``GroupedLinear``'s loop,
:mod:`sim.compute.nvfp4_alpha`), appended to each phase.

With TE's weight cache the weights are quantized once per step, not here
(:func:`weight_quantize_bytes`). The attention core, norms, activations, router and
permutations are untouched, except that FP8 attention (``rules.attention``) gives the core's
kernels the attention format and adds TE's casts of its inputs (:mod:`sim.compute.dpa_casts`).

**Grouped experts quantize per expert.** A MoE layer's experts as Transformer Engine's
``GroupedLinear`` (the grouped GEMMs of :mod:`sim.compute.moe`, not the fused grouped MLP) cast
their input in the forward and their output gradient in the backward with ``tex.split_quantize``,
which runs the recipe's quantize kernels once per expert on the current stream
(``multi_tensor_quantize_impl``, ``csrc/extensions/cast.cpp``: NVIDIA/TransformerEngine v2.7
l.87-150, @70f5366 l.103-150, @71bbefb l.257-300, @4220403 l.394-440, the versions Megatron-Bridge's
containers ship, :mod:`sim.compute.te_grouped_host`), except where a fused kernel covers all
experts: delayed scaling's ``nvte_multi_cast_transpose`` (same lines) and, from TE 2.12,
NVFP4's grouped Hadamard-amax and cast kernels (:func:`per_expert_casts`, by the run's TE
version, :attr:`~sim.compute.precision_rules.LowPrecision.te`). Cast per expert, the input
of ``c`` experts is one kernel of the same bytes standing for ``c x`` :func:`per_expert_casts`
launches (``Kernel.batch``), which :func:`sim.compute.kernels.kernel_time_s` runs back to back
on one stream. Such an input is
the sum over its row groups (experts of different row counts are different inputs).

**The fused grouped MLP** casts its first GEMM's input and its second GEMM's output gradient
once over all experts; in MXFP8 its GLU and dGLU kernels write the other two operands quantized,
so no cast is counted for them (:mod:`sim.compute.fused_mlp_casts`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from sim.compute.cast_bytes import DTYPE_BYTES, cast_bytes_per_element
from sim.compute.dpa_casts import dpa_casts
from sim.compute.fused_mlp_casts import epilogue_cast
from sim.compute.kernels import Kernel, mem
from sim.compute.nvfp4_alpha import alpha_kernels, alpha_launches
from sim.compute.precision import TE, TORCHAO, Recipe, get_recipe
from sim.compute.precision_rules import TE_VERSION, LayerRules, LowPrecision, attention_format
from sim.hardware.gpu_compute import ComputeSpec, LowPrecisionRate

LINEARS = frozenset(
    {"qkv", "q", "k", "v", "proj", "gate", "up", "down", "q_down", "q_up", "kv_down", "kv_up"}
    | {"shared_up", "shared_down", "expert_up", "expert_down", "in_proj", "out_proj", "eh_proj"}
    | {"latent_down", "latent_up"}
)
"""Names of the GEMMs that are linear layers (TE modules) in :mod:`sim.compute.transformer`,
:mod:`sim.compute.mla`, :mod:`sim.compute.moe` (experts; a latent MoE's projections to and from
the latent width, Megatron-Core's ``fc1_latent_proj`` / ``fc2_latent_proj`` TE linears),
:mod:`sim.compute.ssm` (Mamba's ``in_proj``, ``out_proj``) and the MTP layer's ``eh_proj``
(:mod:`sim.compute.decoder`); LoRA adapters stay in 16 bits."""
SHARED_INPUT = {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "fc1", "up": "fc1"}
"""GEMMs that are one linear layer in Megatron (fused QKV, FC1 with gate and up): one cast."""
NORM_FED = {"qkv": "norm1", "fc1": "norm2", "in_proj": "norm1"}
"""Inputs a dense block's ``LayerNormLinear`` takes from its norm (the kernel that writes it)."""
NORM_INPUT = {**NORM_FED, "q_down": "norm1", "kv_down": "norm1", "shared_up": "norm2"}
"""Inputs that are a norm's output: under sequence parallelism Transformer Engine quantizes
them over the rank's own tokens before the all-gather (``layernorm_linear.py:285-312``), so
their cast covers the norm's elements, not the gathered GEMM's."""
_BWD = re.compile(r"^d_(.+)_(in|w)$")
PER_EXPERT_CASTS = {"fp8-tensorwise": 3, "fp8-blockwise": 1, "mxfp8": 1}
"""Quantize kernels ``split_quantize`` launches per expert, by Transformer Engine recipe (module
doc): current scaling an amax, a scale and a cast (TE@70f5366 ``csrc/quantizer.cpp`` 497-535),
block scaling and MXFP8 one ``nvte_quantize_v2`` (805-820, 1091-1101), at every TE version
Megatron-Bridge ships (v2.7-v2.16: @4220403 ``cast.cpp`` ``split_quantize`` fuses only NVFP4).
NVFP4 depends on the version (:func:`per_expert_casts`); delayed scaling quantizes all experts
in one fused launch."""
NVFP4_CASTS = ((2, 11), 3), ((2, 12), 2)
"""NVFP4's quantize kernels per expert before each TE version ``(major, minor)``, and none from
TE 2.12 on. Before 2.11 ``multi_tensor_quantize_impl`` runs each expert's NVFP4 quantizer: an
amax with the Hadamard transform, a row-wise cast and a column-wise Hadamard cast (TE@70f5366
``csrc/quantizer.cpp`` 1481-1638). NVIDIA/TransformerEngine#2351 (89cc2a7e, in v2.11) makes the
amax one grouped launch (``nvte_group_hadamard_transform_amax``; v2.11 ``cast.cpp`` 712-912
``split_quantize_nvfp4_impl``: then per expert ``nvte_quantize_v2`` and the column-wise
Hadamard cast, 2). #2411 (eb8e792b, in v2.12) makes the casts grouped too
(``nvte_group_hadamard_transform_cast_fusion``, or ``nvte_group_nvfp4_quantize_with_amax`` and
``nvte_group_hadamard_transform_cast_fusion_columnwise``: v2.12 @5671fd3 ``cast.cpp`` 803-963,
taken for the recipe's inputs and gradients, which have the Hadamard transform: TE
``common/recipe/__init__.py`` ``NVFP4BlockScaling``, ``disable_rht`` False by default); the
grouped amax launch of 2.11 is not counted."""


def per_expert_casts(recipe: str, te: tuple[int, int] = TE_VERSION) -> int:
    """Quantize kernels ``split_quantize`` launches per expert under Transformer Engine recipe
    ``recipe`` at TE version ``te`` (``(major, minor)``): :data:`PER_EXPERT_CASTS`, NVFP4 by
    :data:`NVFP4_CASTS`; 0 for a recipe that quantizes all experts at once.

    >>> per_expert_casts("nvfp4", (2, 9)), per_expert_casts("nvfp4", (2, 12))
    (3, 0)
    >>> per_expert_casts("mxfp8", (2, 9)), per_expert_casts("fp8-delayed")
    (1, 0)
    """
    if recipe == "nvfp4":
        return next((n for before, n in NVFP4_CASTS if te < before), 0)
    return PER_EXPERT_CASTS.get(recipe, 0)


def _base(name: str) -> tuple[str, str]:
    """``(linear, role)``: ``("up", "fwd")`` for ``up``, ``("expert_up", "in")`` for
    ``d_expert_up_in[128]``; ``("", "")`` for anything else."""
    plain = name.split("[", 1)[0]
    m = _BWD.match(plain)
    if m is not None:
        return m.group(1), m.group(2)
    return plain, "fwd"


def _eligible(kern: Kernel, names: frozenset[str], recipe: Recipe) -> tuple[str, str]:
    """``(linear, role)`` when ``kern`` is a GEMM of one of ``names`` the recipe quantizes."""
    if kern.kind != "gemm":
        return "", ""
    base, role = _base(kern.name)
    if base not in names:
        return "", ""
    if recipe.library == TORCHAO:  # nn.Linear with a dimension not divisible by 16: skipped
        dims = (kern.m, kern.n) if role == "w" else (kern.n, kern.k)  # the weight's
        if any(x % 16 for x in dims):
            return "", ""
    if role == "w" and not recipe.wgrad:
        return "", ""
    return base, role


def _low(kern: Kernel, recipe: Recipe) -> Kernel:
    """``kern`` in the recipe's format: quantized operands, 16-bit output."""
    b = kern.batch
    nbytes = (
        (kern.m * kern.k + kern.k * kern.n) * recipe.data_bytes + kern.m * kern.n * DTYPE_BYTES
    ) * b
    return replace(kern, bytes=float(nbytes), precision=recipe.format)


def quantize_layer(
    kernels: tuple[list[Kernel], list[Kernel], list[Kernel]],
    recipe: Recipe,
    rate: LowPrecisionRate,
    rules: LayerRules = LayerRules(),
    te: tuple[int, int] = TE_VERSION,
    mixed: LowPrecisionRate | None = None,
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``kernels`` (forward, input gradient, weight gradient) as ``recipe`` runs them on a GPU
    with format ``rate`` under Transformer Engine ``te`` (``(major, minor)``; module doc);
    ``mixed``: the GPU's MXFP8 rate, for the linears of ``rules.mxfp8``.

    Raises:
        ValueError: ``rate`` is not the recipe's format; ``rules.mxfp8`` without an MXFP8
            ``mixed`` rate.
    """
    if rate.format != recipe.format:
        raise ValueError(f"{recipe.name} runs {recipe.format} GEMMs, not {rate.format}")
    if rules.mxfp8:
        return _mixed(kernels, recipe, rate, rules, te, mixed)
    extra = {"logits"} if rules.head else set()
    names = (LINEARS - set(rules.keep16)) | extra | ({"router"} if rules.router else set())
    fwd, bwd_in, bwd_w = ([*k] for k in kernels)
    usages = 2 if recipe.wgrad else 1
    x_parts: dict[str, dict[str, float]] = {}
    dy_elems: dict[str, float] = {}
    launches: dict[tuple[str, str], int] = {}  # (role, key): per-expert cast launches
    w_elems = [0.0, 0.0]  # torchao: weights cast per use (forward row-wise, backward column-wise)
    for out in (fwd, bwd_in, bwd_w):
        for i, kern in enumerate(out):
            base, role = _eligible(kern, names, recipe)
            if not base:
                continue
            out[i] = _low(kern, recipe)
            if epilogue_cast(kern, base, role, recipe.format):  # sim.compute.fused_mlp_casts
                continue
            key = SHARED_INPUT.get(base, base)
            per = per_expert_casts(recipe.name, te) if recipe.library == TE else 0
            if kern.grouped and per:  # GroupedLinear's split_quantize (module doc)
                launches[role, key] = launches.get((role, key), 0) + per * kern.batch
            if role == "fwd":
                # GEMMs of one fused linear share one input: it is cast once; an expert row
                # group (``[n]``) is an input of its own
                part = x_parts.setdefault(key, {})
                group = kern.name.partition("[")[2]
                part[group] = max(part.get(group, 0.0), kern.m * kern.k * kern.batch)
                w_elems[0] += kern.k * kern.n * kern.batch
            elif role == "in":
                dy_elems[key] = dy_elems.get(key, 0.0) + kern.m * kern.k * kern.batch
                w_elems[1] += kern.n * kern.k * kern.batch
    x_elems = {key: sum(part.values()) for key, part in x_parts.items()}
    if rules.attention:  # FP8 attention (fp8_dpa): the core's kernels in its format
        fmt = attention_format(recipe.format)
        fwd, bwd_in = ([replace(k, precision=fmt) if k.kind == "attn" else k for k in ks]
                       for ks in (fwd, bwd_in))  # fmt: skip
        cast_f, cast_b = dpa_casts(fwd, fmt)  # TE's casts of Q, K, V and dO (sim.compute.dpa_casts)
        fwd, bwd_in = fwd + cast_f, bwd_in + cast_b
    fwd = _input_casts(fwd, x_elems, recipe, rate, usages)
    fwd = [_launched(k, launches.get(("fwd", k.name.removeprefix("quantize_")))) for k in fwd]
    bwd_in = bwd_in + [
        _launched(
            mem(f"quantize_dgrad_{key}", n * cast_bytes_per_element(recipe, usages, rate.non_tn)),
            launches.get(("in", key)),
        )
        for key, n in dy_elems.items()
    ]
    if not recipe.weight_cache and any(w_elems):
        one = cast_bytes_per_element(recipe, 1, rate.non_tn, weight=True)
        fwd.append(mem("quantize_weights", w_elems[0] * one))
        bwd_in.append(mem("quantize_weights_t", w_elems[1] * one))
    if recipe.library == TE and alpha_launches(recipe.format):  # sim.compute.nvfp4_alpha
        fwd, bwd_in, bwd_w = (ks + alpha_kernels(ks) for ks in (fwd, bwd_in, bwd_w))
    return fwd, bwd_in, bwd_w


def _mixed(
    kernels: tuple[list[Kernel], list[Kernel], list[Kernel]],
    recipe: Recipe,
    rate: LowPrecisionRate,
    rules: LayerRules,
    te: tuple[int, int],
    mixed: LowPrecisionRate | None,
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """:func:`quantize_layer` with ``rules.mxfp8``'s linears in MXFP8 (module doc): the run's
    recipe over the others, then TE's MXFP8 recipe over those alone."""
    mx = get_recipe("mxfp8", TE)
    if mixed is None or mx is None or mixed.format != "mxfp8":
        raise ValueError(f"{', '.join(rules.mxfp8)} in MXFP8 needs the GPU's mxfp8 rate")
    first = replace(rules, keep16=tuple(set(rules.keep16) | set(rules.mxfp8)), mxfp8=())
    out = quantize_layer(kernels, recipe, rate, first, te)
    only = LayerRules(keep16=tuple(sorted(LINEARS - set(rules.mxfp8) - set(rules.keep16))))
    return quantize_layer(out, mx, mixed, only, te)


def _launched(kern: Kernel, launches: int | None) -> Kernel:
    """``kern`` (a cast) as ``launches`` back-to-back kernels when it is GroupedLinear's
    per-expert cast (module doc), else unchanged."""
    if not launches or kern.kind != "mem" or not kern.name.startswith("quantize_"):
        return kern
    return replace(kern, batch=launches)


def _input_casts(
    fwd: list[Kernel],
    x_elems: dict[str, float],
    recipe: Recipe,
    rate: LowPrecisionRate,
    usages: int,
) -> list[Kernel]:
    """``fwd`` with a cast kernel per layer input, or the norm's bytes changed where the
    recipe fuses the cast into it (module doc)."""
    out = list(fwd)
    for key, n in x_elems.items():
        norm = NORM_INPUT.get(key) if recipe.library == TE else None
        at = next((i for i, k in enumerate(out) if k.name == norm), None) if norm else None
        if at is not None:  # the norm reads and writes its r*h elements
            n = out[at].bytes / (2 * DTYPE_BYTES)
        if at is None or key not in NORM_FED or not recipe.norm_fusion:
            out.append(
                mem(f"quantize_{key}", n * cast_bytes_per_element(recipe, usages, rate.non_tn))
            )
            continue
        elems = n
        if recipe.norm_fusion == "cast":  # the norm writes the quantized copies, no 16-bit output
            writes = cast_bytes_per_element(recipe, usages, rate.non_tn) - DTYPE_BYTES
            out[at] = replace(out[at], bytes=out[at].bytes + elems * (writes - DTYPE_BYTES))
        else:  # "amax": the norm computes the amax; the cast reads once
            cast = cast_bytes_per_element(recipe, usages, rate.non_tn) - DTYPE_BYTES
            out.append(mem(f"quantize_{key}", elems * cast))
    return out


def weight_quantize_bytes(params: float, recipe: Recipe, rate: LowPrecisionRate) -> float:
    """HBM bytes of quantizing ``params`` low-precision weights once per step into TE's cache
    (read 16 bits, write the row- and column-wise copies); 0 where the library keeps no cache
    (its casts are in the layers' kernels)."""
    if not recipe.weight_cache:
        return 0.0
    return params * cast_bytes_per_element(recipe, 2, rate.non_tn, weight=True)


def precision_kernels(
    kernels: tuple[list[Kernel], list[Kernel], list[Kernel]],
    kind: str,
    index: int,
    blocks: int,
    low: LowPrecision | None,
    spec: ComputeSpec,
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """Layer ``kind`` (block ``index`` of ``blocks``)'s ``kernels`` under ``low`` on ``spec``:
    :func:`quantize_layer` where ``low`` runs the layer low, else unchanged.

    Raises:
        ValueError: ``spec`` does not run the recipe's format.
    """
    if low is None or not low.layer_low(kind, index, blocks):
        return kernels
    return quantize_for(kernels, low, spec)


def quantize_for(
    kernels: tuple[list[Kernel], list[Kernel], list[Kernel]], low: LowPrecision, spec: ComputeSpec
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """:func:`quantize_layer` of ``kernels`` under ``low`` at ``spec``'s rates (its MXFP8 rate
    too where ``low.rules.mxfp8`` names linears).

    Raises:
        ValueError: ``spec`` does not run the recipe's format (or MXFP8 where needed).
    """
    rate = spec.low_rate(low.recipe.format)
    mixed = spec.low_rate("mxfp8") if low.rules.mxfp8 else None
    return quantize_layer(kernels, low.recipe, rate, low.rules, low.te, mixed)


def layer_index(name: str) -> int:
    """The block index in a layer name (``block.7``, ``moe_block.12``); 0 for others."""
    tail = name.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else 0
