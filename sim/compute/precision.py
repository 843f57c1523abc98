"""Low-precision training recipes: which GEMMs run below 16 bits, and what quantizing costs.

A :class:`Recipe` is one framework library's way of running a model's linear layers in FP8,
MXFP8 or NVFP4 while the parameters and activations stay in the training dtype (bf16):

* **Transformer Engine** (Megatron-LM's ``--fp8-recipe`` / ``--fp4-recipe``; the recipe classes
  of NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/common/recipe/__init__.py``):
  ``fp8-delayed`` (``DelayedScaling``, lines 173-262, Megatron's default), ``fp8-tensorwise``
  (``Float8CurrentScaling``, 286-335), ``fp8-blockwise`` (``Float8BlockScaling``, 392-487: 1x128
  blocks for activations and gradients, 128x128 for weights), ``mxfp8`` (``MXFP8BlockScaling``,
  337-390: an E8M0 scale per 32 elements) and ``nvfp4`` (``NVFP4BlockScaling``, 489-628: E2M1
  with an E4M3 scale per 16 elements). Megatron maps ``--fp8-recipe`` onto them in
  NVIDIA/Megatron-LM@d98e8a6 ``megatron/core/fp8_utils.py:752-810``.
* **torchao** (torchtitan's ``Float8LinearConverter``, pytorch/torchtitan@b5bcd76
  ``torchtitan/components/quantization/float8.py:58``: recipes ``rowwise`` (default) and
  ``rowwise_with_gw_hp``; ``mx.py`` for ``mxfp8``; without a recipe name torchao's default
  ``Float8LinearConfig``, per-tensor dynamic scaling, ``fp8-tensorwise``): ``fp8-rowwise`` and ``fp8-rowwise-gw-hp``
  (pytorch/ao@36027d8 ``torchao/float8/config.py:317-378``: axis-wise scales for input, weight
  and output gradient; the second keeps the weight-gradient GEMM in high precision), ``mxfp8``.

What a recipe's casts move per element, what Transformer Engine's weight cache keeps and what
``--fp8-param-gather`` gathers: :mod:`sim.compute.cast_bytes`.

What stays in 16 bits (:class:`LayerRules`): the word embedding (not a TE module), the output
layer (Megatron builds it as a plain ``ColumnParallelLinear``: ``gpt_model.py:272-292``), the MoE
router (``router.py:90-112``: the input dtype or fp32), the attention core (FP8 attention,
``--fp8-dot-product-attention``, is off by default: ``transformer_config.py:640-644``; where a
run sets it its kernels carry the format, timed where measured: :mod:`sim.compute.swa_speed`;
its FP8 operands' bytes are not counted), norms, activations, residuals and the loss; with Megatron's
``--first-last-layers-bf16`` the first ``--num-layers-at-start-in-bf16`` and last
``--num-layers-at-end-in-bf16`` blocks (default 1 each; not allowed with delayed scaling:
``transformer_config.py:649-658``, ``fp8_utils.py:711-727, 883-888``). torchao converts every
``nn.Linear`` whose dimensions are multiples of 16 that ``filter_fqns`` does not name
(torchtitan ``float8.py:61-64``; default: none, so the output layer too; the docs' example
filters ``output``).

The linear layers' saved inputs, which TE keeps quantized (``linear.py:596-621``), are
counted at the recipe's bytes: :mod:`sim.compute.low_precision_act`.

Checked against Transformer Engine's own GEMM benchmark on a B300 (TE@d0067d0
``docs/examples/gemm_profiling/gemm_profiling.rst``: one layer's 12 GEMMs, pre-quantized and under
``te.autocast``; ``benchmarks/accuracy/bench_te_gemm_profile.py``): the casts its autocast mode
adds, 2.335 ms with current scaling and 1.823 ms with MXFP8, are predicted from the bytes of
:mod:`sim.compute.cast_bytes` at
2.450 and 1.822 ms; per-tensor FP8 GEMMs run 1.92x as fast as BF16 there, 1.89x in the ``dgx-b300``
preset; MXFP8 GEMMs take 7.161 ms against FP8's 6.812 (x 0.951 the rate: forward 2.365 / 2.158,
input gradient 2.397 / 2.329, weight gradient 2.400 / 2.325 ms), and the Blackwell presets run
MXFP8 at that fraction of their FP8 efficiency (their descriptions). Those MXFP8 times include a
scale swizzle of both operands per GEMM call (the benchmark's quantizer keeps ``optimize_for_gemm``
False, so ``gemm.cpp`` swizzles: ``swizzle_scaling_factors``, TE@v2.9
``pytorch/csrc/util.cpp:12-85``, a separate kernel per operand), which is what the Transformer
Engine of Megatron-Bridge's releases runs in training too (NVIDIA-NeMo/Megatron-Bridge tags
v0.1.0rc3 to v0.6.0, 2025-10 to 2026-08, pin TE 2.6 to 2.17.1 in ``uv.lock``: v0.2.0 2.9, v0.3.0
2.12, v0.4.0 2.14, v0.5.0 2.16, v0.6.0 2.17.1): through TE 2.11 every MXFP8 operand is swizzled per
GEMM call; from 2.12 ``te.Linear`` has the cast write swizzled scales for the input (not a
column-parallel layer's under sequence parallelism, whose input is all-gathered) and the output
gradient (not a row-parallel layer's under sequence parallelism), TE@v2.12
``module/linear.py:1486-1496``, while the cached weight stays unswizzled and is swizzled in each
forward and input-gradient call until TE 2.18 (``_enable_weight_preswizzle``, TE@d0067d0
``module/base.py:1277-1303``). The swizzle reads and writes ``1/32`` byte per operand element:
2.48e9 elements per benchmarked layer, 155 MB, 29 us at 0.666 x 8 TB/s plus 24 small kernels, about
a quarter of the 0.349 ms gap (estimate, not measured); where TE 2.12-2.17 skips it for an
activation the rate overstates the cost by up to half that share (assumption: about 1 % of an MXFP8
GEMM). MXFP8 needs both a row- and a column-wise copy of each operand (its scales run along K)
where per-tensor FP8 on Blackwell uses one: one TE kernel writes both
(``cast_kernels.cuh:1580-1590``, ``ScalingType::BIDIMENSIONAL`` at TE@v2.9), counted by
:func:`sim.compute.cast_bytes.cast_bytes_per_element`. The Blackwell presets' GEMM efficiencies per format are that
benchmark's (``dgx-b300``; moved to B200 and GB200 by the MAMF ratio of each format: their
descriptions; to GB300 by what B300's 1100 W limit costs each format on random data, which GB300's
1400 W is assumed to buy back: ``gb300-nvl72``'s description), so its BF16, FP8 and NVFP4 times are
the ``dgx-b300`` preset's within wave quantization and launch overhead, and NVFP4 runs 3.48x as
fast as BF16 (1.81x FP8) at its shapes; its three passes (K = 4096-16384) run alike, so the NVFP4
rate is flat. Azure's cuBLASLt sweep on GB200 (research/gpus/microbench.md §1.2) measures 1.83x FP8
at 4096^3 but 2.62x at 8192^3 and above: a large GEMM's NVFP4 may be up to 1.45x faster than
modelled. SimuMax's B200 node measured slower BF16 GEMMs (0.488 of peak, against 0.642 moved from
TE's benchmark): its figure is a shipped overlay (``sim/hardware/overlays/simumax-b200.yaml``) that
SimuMax's runs use.

Where Megatron runs the norm (``--normalization RMSNorm``) fused with the quantization
(``NVTE_NORM_FWD_USE_CUDNN=1`` with MXFP8: ``FULLY_FUSED``, ``normalization.cpp:343-350``; set
by a few of Megatron-Bridge's MoE recipes), the separate cast remains counted (an
overestimate of one read of the norm's output).

Not modelled (assumptions, each an error of a few per cent at most on the layers' time or
memory): FP8 attention (off by default, above); delayed
scaling's amax all-reduce of a few kilobytes per step; torch.compile's fusion of torchao's casts
into neighbouring kernels; NVFP4's scale swizzling (``mxfp8_tensor.py:139-176``; MXFP8's is in
its GEMM rate, above) and random Hadamard transform beyond the bytes of its casts. Current
scaling's and NVFP4's per-tensor amax all-reduce over the tensor group under sequence
parallelism is a collective of the layer's (:mod:`sim.parallel.amax_reduce`).
"""

from __future__ import annotations

from dataclasses import dataclass

HIGH_PRECISION = ("bf16", "fp16", "fp32")
"""Precision names that mean "no low-precision GEMMs": every GEMM in the training dtype."""
TE, TORCHAO = "transformer_engine", "torchao"
"""The two libraries whose recipes are modelled."""


@dataclass(frozen=True)
class Recipe:
    """One library's low-precision recipe (module doc).

    Attributes:
        name: the precision name (``fp8-delayed``, ``mxfp8``...).
        library: :data:`TE` or :data:`TORCHAO`.
        format: the GEMM format (:data:`sim.hardware.gpu_compute.LOW_PRECISION_FORMATS`).
        data_bytes: bytes per quantized element (1 for FP8, 0.5 for FP4).
        scale_bytes: scale bytes per element of one activation or gradient copy (0 per
            tensor; 4/128 for 1x128 fp32 blocks; 1/32 for MXFP8's E8M0 per 32; 1/16 for
            NVFP4's E4M3 per 16).
        weight_scale_bytes: the same for a weight copy (4/16384 for 128x128 fp32 blocks).
        per_tensor: one scale per tensor, so one copy serves both usages where the GPU takes
            any FP8 layout (:attr:`~sim.hardware.gpu_compute.LowPrecisionRate.non_tn`).
        amax_pass: a separate read of the 16-bit tensor for its amax before the cast.
        cast_per_usage: one cast kernel per usage, each reading the 16-bit tensor (torchao);
            False: one kernel writes both usages (TE).
        norm_fusion: what the norm before a fused ``LayerNormLinear`` does for the cast of its
            output (TE ``csrc/extensions/normalization.cpp:305-440``): ``"cast"`` it writes the
            quantized tensor itself (``FULLY_FUSED``, delayed scaling), ``"amax"`` it computes
            the amax while writing 16 bits (``FUSED_NORM_AMAX_FP8``, current scaling), ``""``
            nothing (a separate cast).
        weight_cache: quantized weights kept across micro-batches (TE), else cast per use.
        wgrad: the weight-gradient GEMM runs in the low-precision format.
        source: where the recipe is defined.
    """

    name: str
    library: str
    format: str
    data_bytes: float
    scale_bytes: float
    weight_scale_bytes: float
    per_tensor: bool
    amax_pass: bool
    cast_per_usage: bool
    norm_fusion: str
    weight_cache: bool
    wgrad: bool
    source: str

    def copies(self, non_tn: bool) -> int:
        """Quantized copies of a tensor used both row- and column-wise: 1 for a per-tensor
        scale on a GPU that takes any FP8 layout, else 2."""
        return 1 if self.per_tensor and non_tn else 2

    def label(self) -> str:
        """``name (library)`` for notes."""
        return f"{self.name} ({self.library})"


_TE_RECIPE = "NVIDIA/TransformerEngine@d0067d0 transformer_engine/common/recipe/__init__.py"
_TORCHAO = "pytorch/ao@36027d8 torchao/float8/config.py:317-378"

RECIPES: dict[tuple[str, str], Recipe] = {
    (r.name, r.library): r
    for r in (
        Recipe(
            "fp8-delayed",
            TE,
            "fp8",
            1.0,
            0.0,
            0.0,
            True,
            False,
            False,
            "cast",
            True,
            True,
            f"{_TE_RECIPE}:173-262 DelayedScaling (amax from the history, recorded by the cast)",
        ),
        Recipe(
            "fp8-tensorwise",
            TE,
            "fp8",
            1.0,
            0.0,
            0.0,
            True,
            True,
            False,
            "amax",
            True,
            True,
            f"{_TE_RECIPE}:286-335 Float8CurrentScaling",
        ),
        Recipe(
            "fp8-blockwise",
            TE,
            "fp8",
            1.0,
            4 / 128,
            4 / 128**2,
            False,
            False,
            False,
            "",
            True,
            True,
            f"{_TE_RECIPE}:392-487 Float8BlockScaling (1x128 activations and gradients, "
            "128x128 weights, fp32 scales)",
        ),
        Recipe(
            "mxfp8",
            TE,
            "mxfp8",
            1.0,
            1 / 32,
            1 / 32,
            False,
            False,
            False,
            "",
            True,
            True,
            f"{_TE_RECIPE}:337-390 MXFP8BlockScaling (E8M0 scale per 32)",
        ),
        Recipe(
            "nvfp4",
            TE,
            "nvfp4",
            0.5,
            1 / 16,
            1 / 16,
            False,
            True,
            False,
            "",
            True,
            True,
            f"{_TE_RECIPE}:489-628 NVFP4BlockScaling (E4M3 scale per 16, fp32 tensor amax)",
        ),
        Recipe(
            "fp8-rowwise",
            TORCHAO,
            "fp8",
            1.0,
            0.0,
            0.0,
            False,
            False,
            True,
            "",
            False,
            True,
            f"{_TORCHAO} ROWWISE (axis-wise scales for input, weight, output gradient)",
        ),
        Recipe(
            "fp8-tensorwise",
            TORCHAO,
            "fp8",
            1.0,
            0.0,
            0.0,
            False,
            True,
            True,
            "",
            False,
            True,
            "pytorch/ao@36027d8 torchao/float8/config.py:141-157, 331 TENSORWISE (the default "
            "Float8LinearConfig: one dynamic scale per tensor); float8_linear.py:38-205 "
            "matmul_with_hp_or_float8_args casts each usage from the saved 16-bit tensor, each "
            "after its own amax (float8_utils.py tensor_to_amax: torch.max(torch.abs(x)))",
        ),
        Recipe(
            "fp8-rowwise-gw-hp",
            TORCHAO,
            "fp8",
            1.0,
            0.0,
            0.0,
            False,
            False,
            True,
            "",
            False,
            False,
            f"{_TORCHAO} ROWWISE_WITH_GW_HP (weight gradient in high precision)",
        ),
        Recipe(
            "mxfp8",
            TORCHAO,
            "mxfp8",
            1.0,
            1 / 32,
            1 / 32,
            False,
            False,
            True,
            "",
            False,
            True,
            "pytorch/torchtitan@b5bcd76 torchtitan/components/quantization/mx.py (torchao "
            "MXFP8, recipe mxfp8_rceil: dim0 and dim1 casts apart)",
        ),
    )
}


def recipe_names(library: str | None = None) -> list[str]:
    """The precision names with a recipe (of ``library`` only, if given), sorted."""
    return sorted({n for n, lib in RECIPES if library is None or lib == library})


def get_recipe(name: str, library: str = TE) -> Recipe | None:
    """The recipe ``name`` as ``library`` runs it; None for a 16-bit name
    (:data:`HIGH_PRECISION`) or ``""``.

    Raises:
        ValueError: an unknown name, or one ``library`` does not run (the message lists the
            names it does).
    """
    if name in ("", *HIGH_PRECISION):
        return None
    found = RECIPES.get((name, library))
    if found is not None:
        return found
    mine = ", ".join(recipe_names(library))
    if name in recipe_names():
        other = next(lib for n, lib in RECIPES if n == name)
        raise ValueError(
            f"precision {name!r} is {other}'s recipe; {library} runs {mine}"
            + (
                " (torchtitan@b5bcd76 components/quantization/float8.py:58)"
                if library == TORCHAO
                else ""
            )
        )
    raise ValueError(
        f"unknown precision {name!r}; use bf16, fp16, fp32 or a recipe: "
        + ", ".join(recipe_names())
    )
