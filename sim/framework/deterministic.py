"""Megatron-LM's ``--deterministic-mode``: the fill kernel PyTorch launches for every new tensor.

**What the flag does.** ``--deterministic-mode`` calls ``torch.use_deterministic_algorithms(True)``
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/training/determinism.py::apply_determinism_to_args``,
called from ``arguments.py::validate_args``; in ``arguments.py`` itself since
NVIDIA/Megatron-LM@2ea54d6a37, 2024-07-25, before every golden value of the functional tests).
With it, PyTorch's ``torch.utils.deterministic.fill_uninitialized_memory`` (True by default)
makes ``empty`` fill the memory it returns: ``aten/src/ATen/native/cuda/TensorFactories.cu``
``empty_cuda`` (and ``empty_strided_cuda``) call ``fill_empty_deterministic_`` (``native/
TensorFactories.h``: ``tensor.fill_(NaN)`` for floating point, the type's maximum for integers)
when ``deterministicAlgorithms() && deterministicFillUninitializedMemory()``. So every CUDA
tensor allocated through the dispatcher's ``empty`` (``at::empty``, ``torch.empty``,
``empty_like``, hence ``clone``/``contiguous`` copies and dtype casts) costs one more op on the
host, a ``fill_`` dispatched and launched, and a write of its bytes on the device. Outputs that
structured kernels allocate (``mm``, ``bmm``, ``baddbmm``, ``add``, ``cat``...) go through
``at::detail::empty_cuda`` and are not filled, nor are the tensors of ``torch.compile``d
regions (Megatron's ``jit_fuser`` is ``torch.compile`` on torch >= 2.2, ``megatron/core/jit.py``:
bias-dropout-add and bias-GeLU).

**Counted** (one Megatron-Core GPT layer of ``get_gpt_layer_with_transformer_engine_spec``,
bf16, tensor parallel without sequence parallelism, NVIDIA/TransformerEngine v2.8 ``TE:``, each
``at::empty`` of a non-empty tensor one fill; :data:`TE_FWD`, :data:`TE_BWD`,
:data:`ATTENTION`, :data:`WGRAD_BWD`): in the forward, each ``LayerNormLinear`` allocates
``layernorm_fwd``'s ``mu``, ``rsigma`` and output (``TE:transformer_engine/pytorch/csrc/
extensions/normalization.cpp`` 82-91, ``quantizer.cpp::NoneQuantizer::create_tensor`` 77:
``at::empty``) and every TE GEMM its output (``extensions/gemm.cpp::gemm`` 131-133,
``createOutputTensor``); in the backward each TE module's dgrad GEMM its output, each
``layernorm_bwd`` ``dx``, ``dgamma``, ``dbeta`` (``empty_like``, 23-25) and its workspace
(``allocateSpace`` 46, ``common.cpp`` 256: ``at::empty``), the QKV GEMM's fused bias gradient
(``gemm.cpp`` 173; the other three linears' biases are added by Megatron's compiled
bias-dropout-add / bias-GeLU, ``skip_bias_add``) and, with ``--no-gradient-accumulation-fusion``,
each weight-gradient GEMM its output (``TE:module/linear.py`` 841-869: ``out = main_grad`` only
under fusion). ``layernorm_fwd``'s workspace is taken as empty (one CTA per row: an
assumption), which launches no fill.

**Not counted:** host tensors (``torch.tensor`` of a scale, CPU fills without a launch); the
embedding, the output layer and the loss (Megatron's deterministic embedding is
``weight[masked_input]``, whose backward ``index_put_`` accumulates by sorting as
``embedding_dense_backward`` already does: ``megatron/core/tensor_parallel/layers.py`` 358-362);
MoE experts and routers, Mamba mixers (their layers get only their attention half); the
optimizer step's and logging's fills (``torch.zeros``, ``torch.tensor(..., device='cuda')``:
about 20 per iteration, 0.2 ms at the A100 preset's op, against the functional tests' 27 ms
per-iteration gap; ``measurements/host/golden_rows.md``); Megatron's own layers
(``--transformer-impl local``: apex's norms and ``F.linear`` allocate differently, not counted).
**The device side** is not charged: a fill writes its tensor once at HBM speed, 9 B per score
with unfused attention and dropout (the scores, the softmax output, the dropout's output and
mask, its backward), 151 MB per layer and micro-batch for the functional tests' tp 2 GPT (b 4,
4 heads per rank, s 1024): about 0.08 ms at 1.94 TB/s, under the rows' host time; the rest are
``s b h``-sized tensors.

The host prices each fill as one op of the pass that issues it (a forward op, or an op the
autograd engine dispatches in a backward: :class:`~sim.hardware.host_ops.HostOverhead`), as it
does the layer's other ops: an assumption that a fill dispatched from inside ``empty`` costs
what an op dispatched from Python does.
"""

from __future__ import annotations

from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost
from sim.framework.options import Option

_TE = "TE:transformer_engine/pytorch"
_ON = (False, True)

TE_FWD = {
    "attention": (("linear_qkv: layernorm_fwd's mu, rsigma, output; the GEMM's output", 4),
                  ("linear_proj: the GEMM's output", 1)),
    "mlp": (("linear_fc1: layernorm_fwd's mu, rsigma, output; the GEMM's output", 4),
            ("linear_fc2: the GEMM's output", 1)),
}  # fmt: skip
"""Fills in the forward of a layer's Transformer Engine modules, by half of the layer (module
doc): ``LayerNormLinear`` 3 + 1, ``Linear`` 1."""

TE_BWD = {
    "attention": (("linear_qkv: dgrad output, fused bias gradient, layernorm_bwd's dx, dgamma, "
                   "dbeta, workspace", 6), ("linear_proj: dgrad output", 1)),
    "mlp": (("linear_fc1: dgrad output, layernorm_bwd's dx, dgamma, dbeta, workspace", 5),
            ("linear_fc2: dgrad output", 1)),
}  # fmt: skip
"""Fills in their backward, with gradient-accumulation fusion (module doc)."""

WGRAD_BWD = {"attention": 2, "mlp": 2}
"""More fills without gradient-accumulation fusion: each weight-gradient GEMM's output."""

ATTENTION: dict[str, tuple[int, int, str]] = {
    "unfused": (5, 1, f"{_TE}/attention/dot_product_attention/backends.py::"
                "UnfusedDotProductAttention: torch.empty for the scores, the fused softmax's "
                "output (csrc/extensions/softmax.cpp 141; its backward is in place), dropout's "
                "output and mask (aten/src/ATen/native/cuda/Dropout.cu::dropout_cuda: two "
                "empty_like), the context's permute().contiguous(); backward: dropout's "
                "masked_scale output"),
    "local": (4, 1, "MLM:megatron/core/transformer/dot_product_attention.py: as unfused, the "
              "scores in get_global_memory_buffer() (allocated once)"),
    "fused": (4, 2, f"{_TE}/csrc/extensions/attention.cpp::fused_attn_fwd: O (70), rng_state "
              "(213), workspace (236), softmax statistics (258); fused_attn_bwd: one dQKV for "
              "the interleaved QKV Megatron's split gives (355-372), workspace (535)"),
}  # fmt: skip
"""``(forward, backward, source)`` fills of the attention core by ``--attention-backend``;
``auto`` and ``flash`` are counted as ``fused`` (an assumption for flash-attn's own kernels).
Attention dropout as Megatron's default (0.1) is assumed: without it ``unfused``/``local`` fill
two fewer tensors forward and one fewer backward."""

BACKENDS = ("auto", "flash", "fused", "unfused", "local")
"""Megatron's ``--attention-backend`` values (``megatron/training/arguments.py``)."""

HALVES = {"block": ("attention", "mlp"), "attention": ("attention",), "mlp": ("mlp",),
          "moe_block": ("attention",), "mtp": ("attention", "mlp")}  # fmt: skip
"""The halves of a layer kind whose fills are counted (MoE experts are not: module doc)."""

DETERMINISM_OPTIONS: tuple[Option, ...] = (
    Option(
        "deterministic_mode",
        False,
        _ON,
        "MLM:megatron/training/determinism.py::apply_determinism_to_args "
        "(torch.use_deterministic_algorithms(True)); aten/src/ATen/native/cuda/"
        "TensorFactories.cu::empty_cuda -> fill_empty_deterministic_",
        "every tensor the layers allocate through empty is filled first: one more op per "
        "allocation (sim.framework.deterministic)",
    ),
    Option(
        "attention_backend",
        "auto",
        BACKENDS,
        "MLM:megatron/training/arguments.py --attention-backend (default auto)",
        "the attention core whose allocations deterministic_mode fills (the kernel model "
        "takes training.attention)",
    ),
    Option(
        "gradient_accumulation_fusion",
        True,
        _ON,
        "MLM:megatron/training/arguments.py --no-gradient-accumulation-fusion; "
        f"{_TE}/module/linear.py (out=main_grad under fusion)",
        "weight gradients written into main_grad by the GEMM; off: each GEMM allocates them "
        "(filled under deterministic_mode)",
    ),
)
"""The options of :func:`layer_fills` (module doc)."""


def layer_fills(kind: str, backend: str = "auto", wgrad_fusion: bool = True) -> tuple[int, int]:
    """``(forward, backward)`` fills of one layer of ``kind`` under deterministic mode, with the
    attention core of ``backend`` (:data:`ATTENTION`) and with or without gradient-accumulation
    fusion (module doc); 0 for kinds not counted (embedding, head, Mamba).

    Raises:
        ValueError: an unknown ``backend``.

    Example:
        >>> layer_fills("block", "unfused", wgrad_fusion=False)
        (15, 18)
        >>> layer_fills("block"), layer_fills("moe_block", "unfused"), layer_fills("head")
        ((14, 15), (10, 8), (0, 0))
    """
    if backend not in BACKENDS:
        raise ValueError(f"option attention_backend must be one of {', '.join(BACKENDS)}")
    fwd = bwd = 0
    for half in HALVES.get(base_kind(kind), ()):
        fwd += sum(n for _, n in TE_FWD[half])
        bwd += sum(n for _, n in TE_BWD[half]) + (0 if wgrad_fusion else WGRAD_BWD[half])
        if half == "attention":
            core = ATTENTION[backend if backend in ("unfused", "local") else "fused"]
            fwd, bwd = fwd + core[0], bwd + core[1]
    return fwd, bwd


def with_deterministic_fills(
    cost: StageCost, kinds: list[str], backend: str = "auto", wgrad_fusion: bool = True
) -> StageCost:
    """``cost`` with each layer's fills (:func:`layer_fills` of its kind) added to its forward
    and backward ops, and to the stage's ``fwd_ops`` and ``bwd_ops``; ``kinds``: the stage's
    layer kinds in order. Unchanged without per-layer counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2,
        ...               bwd_layers=((1.0, 20.0, 0.0),) * 2)
        >>> d = with_deterministic_fills(c, ["embedding", "block"], "unfused", False)
        >>> [x[1] for x in d.fwd_layers], [x[1] for x in d.bwd_layers], d.fwd_ops, d.bwd_ops
        ([10.0, 25.0], [20.0, 38.0], 15.0, 18.0)
    """
    if not cost.fwd_layers or not cost.bwd_layers:
        return cost
    fills = [layer_fills(k, backend, wgrad_fusion) for k in kinds[: len(cost.fwd_layers)]]
    return cost.with_layer_ops([f for f, _ in fills], [b for _, b in fills])


__all__ = ["DETERMINISM_OPTIONS", "layer_fills", "with_deterministic_fills"]
