"""Which layers a low-precision recipe runs below 16 bits (:class:`LayerRules`), and the recipe
with its rules as a trace or a grid point carries it (:class:`LowPrecision`).

The rules and their sources are :mod:`sim.compute.precision`'s module doc ("What stays in 16
bits"): Transformer Engine under Megatron-LM quantizes the linear layers of the transformer
blocks only (optionally not the first and last blocks), torchao every ``nn.Linear`` whose
dimensions divide by 16, the output layer and the router included.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.compute.decoder_shape import base_kind
from sim.compute.precision import TE, TORCHAO, Recipe, get_recipe


@dataclass(frozen=True)
class LayerRules:
    """Which layers run their GEMMs in low precision (module doc).

    Attributes:
        bf16_start, bf16_end: transformer blocks kept in 16 bits at the start and the end.
        head: the output layer's GEMMs in low precision (torchao; under TE with Megatron-Core's
            ``fp8_output_proj`` and the MXFP8 recipe: ``gpt_model.py:253-257`` builds the
            output layer as ``TELMHeadColumnParallelLinear``, ``extensions/
            transformer_engine.py:1440-1461`` runs it under ``get_fp8_context(config)``, which
            takes no layer number, so first/last-layer rules do not touch it;
            NVIDIA/Megatron-LM@d0b3b775, the same at 458c8d0e and cd4afffa; absent before).
        router: the MoE router's GEMM in low precision.
        mtp: the MTP depths' linear layers in low precision (Megatron-Bridge's
            ``keep_mtp_spec_in_bf16`` turns it off: NVIDIA-NeMo/Megatron-Bridge@067f987df0
            ``src/megatron/bridge/models/hybrid/hybrid_provider.py:167``).
        keep16: linear layers (GEMM names of :data:`sim.compute.quantize.LINEARS`) kept in 16
            bits wherever they are, as a Transformer Engine quantization-recipe config's
            ``bf16`` matchers keep modules (e.g. ``perf_recipes/nemotronh/te_quant.cfg``).
        attention: the attention core in FP8 too (Megatron's ``--fp8-dot-product-attention``,
            Transformer Engine's ``fp8_dpa``): its kernels carry the format
            (:func:`attention_format`), which :mod:`sim.compute.swa_speed` times where measured.
        mxfp8: linear layers (GEMM names, as ``keep16``) run in MXFP8 under another recipe, as
            a Transformer Engine quantization-recipe config's ``mxfp8`` matchers run modules
            (``te_quant.cfg``'s ``'*mixer.out_proj'`` under the NVFP4 recipe:
            :func:`sim.compute.quantize.quantize_layer`); nothing under the MXFP8 recipe.
    """

    bf16_start: int = 0
    bf16_end: int = 0
    head: bool = False
    router: bool = False
    mtp: bool = True
    keep16: tuple[str, ...] = ()
    attention: bool = False
    mxfp8: tuple[str, ...] = ()

    @classmethod
    def default(
        cls,
        recipe: Recipe,
        first_last_bf16: bool = False,
        start: int = 1,
        end: int = 1,
        mtp: bool = True,
        keep16: tuple[str, ...] = (),
        attention: bool = False,
        head: bool = False,
        mxfp8: tuple[str, ...] = (),
    ):
        """The library's defaults (TE: blocks only, optionally the first and last in 16 bits,
        and the output layer with ``head``, Megatron-Core's ``fp8_output_proj``; torchao: every
        linear with dimensions divisible by 16, output layer included).

        Raises:
            ValueError: first/last blocks in 16 bits with delayed scaling (Megatron refuses).
        """
        if first_last_bf16 and recipe.name == "fp8-delayed":
            raise ValueError(
                "first_last_layers_bf16 is not allowed with delayed scaling (Megatron-LM "
                "transformer_config.py:649-658); use fp8-tensorwise or another recipe"
            )
        keep = (start, end) if first_last_bf16 else (0, 0)
        if recipe.library == TORCHAO:
            return cls(*keep, head=True, router=True, mtp=mtp, keep16=keep16)
        mx = mxfp8 if recipe.format != "mxfp8" else ()
        return cls(*keep, head=head, mtp=mtp, keep16=keep16, attention=attention, mxfp8=mx)

    def block_low(self, index: int, blocks: int) -> bool:
        """Whether transformer block ``index`` (of ``blocks``) runs in low precision."""
        return self.bf16_start <= index < blocks - self.bf16_end

    def describe(self) -> str:
        """The rules in words."""
        out = ["blocks' linear layers in low precision"]
        if self.bf16_start or self.bf16_end:
            out.append(f"first {self.bf16_start} and last {self.bf16_end} blocks in 16 bits")
        if not self.mtp:
            out.append("MTP depths in 16 bits")
        if self.keep16:
            out.append(f"{', '.join(self.keep16)} in 16 bits")
        if self.mxfp8:
            out.append(f"{', '.join(self.mxfp8)} in MXFP8")
        out.append("output layer " + ("low precision" if self.head else "in 16 bits"))
        out.append("router " + ("low precision" if self.router else "in 16 bits"))
        core = "embedding" if self.attention else "attention core, embedding"
        out.append(core + ", norms in 16 bits")
        if self.attention:
            out.append("attention core in FP8 (fp8_dpa)")
        return "; ".join(out)


ATTENTION_FORMAT = {"fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "mxfp8"}
"""A recipe's format -> the format its FP8 attention runs in: Transformer Engine's default
pairing (NVIDIA/TransformerEngine@4220403 ``pytorch/attention/dot_product_attention/
dot_product_attention.py`` lines 100-170: FP8 delayed or current scaling attention with the
FP8 recipes, MXFP8 attention with MXFP8 and NVFP4, unless ``NVTE_DPA_FP8_RECIPE`` says
otherwise)."""


def attention_format(recipe_format: str) -> str:
    """The format FP8 attention runs in under a recipe of ``recipe_format``
    (:data:`ATTENTION_FORMAT`)."""
    return ATTENTION_FORMAT.get(recipe_format, "fp8")


TE_VERSION = (2, 16)
"""The Transformer Engine version (major, minor) a recipe runs under where the run does not say
(``training.precision_options.te_version``): assumption, the TE of the newest Megatron-Bridge
container pipesim's sources trace (26.06, TE 2.16.0+4220403e: Megatron-Bridge v0.5.0
``uv.lock``)."""


def te_version(text: str | None) -> tuple[int, int]:
    """``(major, minor)`` of a Transformer Engine version such as ``"2.14"`` or
    ``"2.14.1+366798ef"``; :data:`TE_VERSION` for None or an empty string.

    Raises:
        ValueError: not ``major.minor[...]`` with integers.

    >>> te_version("2.14.1+366798ef"), te_version(None)
    ((2, 14), (2, 16))
    """
    if not text:
        return TE_VERSION
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1].split("+")[0])
    except (IndexError, ValueError):
        raise ValueError(f"Transformer Engine version {text!r} is not major.minor") from None


BLOCK_KINDS = ("block", "moe_block", "attention", "mlp", "moe", "mamba")
"""Layer kinds of the model's body (:mod:`sim.compute.decoder_shape`: uniform blocks, hybrid
layers; ``swa_`` windowed ones too), counted by Megatron's first/last-layers rule."""


@dataclass(frozen=True)
class LowPrecision:
    """A recipe with its layer rules: what a trace or a grid point runs below 16 bits.

    Attributes:
        recipe: the :class:`Recipe`.
        rules: the :class:`LayerRules`.
        param_gather: Megatron's ``--fp8-param-gather``: the parameters themselves are kept
            quantized (no 16-bit copy) and the distributed optimizer all-gathers them in
            their format (``megatron/training/argument_utils.py:312``,
            ``param_and_grad_buffer.py:888-951``; needs the distributed optimizer,
            ``arguments.py:1095-1097``); TE's MXFP8 in 16 bits through the gradient buffer
            (``reuse_grad_buf_for_mxfp8_param_ag``: :mod:`sim.memory.precision`).
        te: the Transformer Engine version ``(major, minor)`` the recipe runs under (what its
            grouped experts' quantize launches, :func:`sim.compute.quantize.per_expert_casts`).
    """

    recipe: Recipe
    rules: LayerRules = LayerRules()
    param_gather: bool = False
    te: tuple[int, int] = TE_VERSION

    def layer_low(self, kind: str, index: int, blocks: int) -> bool:
        """Whether layer ``kind`` (block ``index`` of ``blocks`` for a block) runs any GEMM in
        low precision."""
        base = base_kind(kind)
        if base in BLOCK_KINDS:
            return self.rules.block_low(index, blocks)
        if base == "mtp":  # DeepSeek-V3's MTP depths: transformer layers of the same spec
            return self.rules.mtp
        return base == "head" and self.rules.head

    def to_dict(self) -> dict:
        """JSON-able form (a trace's provenance), read back by :meth:`from_dict`; ``te`` only
        where it is not :data:`TE_VERSION` (the traces written before it stay equal)."""
        r = self.rules
        return (
            {
                "name": self.recipe.name,
                "library": self.recipe.library,
                "bf16_start": r.bf16_start,
                "bf16_end": r.bf16_end,
                "head": r.head,
                "router": r.router,
                "mtp": r.mtp,
                "keep16": list(r.keep16),
                "attention": r.attention,
                "param_gather": self.param_gather,
            }
            | ({"te": ".".join(map(str, self.te))} if self.te != TE_VERSION else {})
            | ({"mxfp8": list(r.mxfp8)} if r.mxfp8 else {})
        )

    @classmethod
    def from_dict(cls, data: dict) -> LowPrecision:
        """The object :meth:`to_dict` wrote.

        Raises:
            ValueError: an unknown recipe.
        """
        recipe = get_recipe(str(data["name"]), str(data.get("library", TE)))
        if recipe is None:
            raise ValueError(f"precision {data['name']!r} is not a low-precision recipe")
        rules = LayerRules(
            int(data.get("bf16_start", 0)),
            int(data.get("bf16_end", 0)),
            bool(data.get("head", False)),
            bool(data.get("router", False)),
            bool(data.get("mtp", True)),
            tuple(str(x) for x in data.get("keep16", ())),
            bool(data.get("attention", False)),
            tuple(str(x) for x in data.get("mxfp8", ())),
        )
        te = te_version(str(data["te"])) if data.get("te") else TE_VERSION
        return cls(recipe, rules, bool(data.get("param_gather", False)), te)

    def describe(self) -> str:
        """One line for notes."""
        gather = "; parameters kept and all-gathered quantized" if self.param_gather else ""
        return f"{self.recipe.label()}: {self.rules.describe()}{gather}"
