"""Host work of Transformer Engine's ``GroupedLinear`` per local expert (a MoE layer's experts).

Megatron-Core runs a MoE layer's experts with ``--moe-grouped-gemm`` as ``TEGroupedMLP``: two
``te.pytorch.GroupedLinear`` (``linear_fc1``, ``linear_fc2``) of ``num_gemms`` = the rank's
local experts ``N`` (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/extensions/
transformer_engine.py`` 2382-2727). The Megatron-Core op counts
(:mod:`sim.compute.mcore_ops`) stand for one expert's ops; this module counts what a
``GroupedLinear`` does once per expert beyond that, read from TransformerEngine's source at the
version Megatron-Bridge's containers ship (Bridge ``docs/releases/software-versions.md`` and
``uv.lock`` at each tag: 25.09 TE 2.7.0, 25.11 TE 2.9 @70f5366, 26.02 TE 2.12 @5671fd3, 26.04
TE 2.14 @71bbefb, 26.06 TE 2.16 @4220403). Line numbers below are TE @70f536662ae1
(``release_v2.9``); v2.7, @5671fd3 and @4220403 have the same per-expert loops
(``split_quantize`` in forward and backward, ``get_weight_workspace`` per weight,
``general_grouped_gemm``, ``handle_custom_ddp_from_mcore``), a few lines apart; at @4220403
the module's grouped GEMM is still one cuBLAS GEMM per expert (``csrc/extensions/gemm.cpp``
602-607: "For now, we only have multi-stream cublas backend"; the single-launch grouped-tensor
GEMM serves the fused ops).

**Forward, per expert** (``_GroupedLinear.forward``, ``module/grouped_linear.py``):

* ``tex.split_quantize`` (l.127): per expert, one quantized tensor object built in Python
  (``csrc/extensions/cast.cpp`` 558-592) and the recipe's quantize kernels
  (``multi_tensor_quantize_impl``, cast.cpp 145-148): :func:`quantize_launches`. BF16 runs one
  ``torch.split`` instead (its views: not counted);
* ``module.get_weight_workspace`` per weight (l.137-145): one Python call; the weight is
  quantized on a step's first micro-batch only (Megatron passes ``is_first_microbatch``,
  ``transformer_engine.py`` 2719-2727), so no launch is charged per micro-batch;
* ``update_usage`` of the input and the weight copies (l.202-210), ``prepare_for_saving`` of
  the two quantized tensors (l.225-230): four Python calls under a recipe;
* ``general_grouped_gemm`` (l.171): one cuBLASLt GEMM per expert over ``num_gemm_streams``
  (each with TE's per-call descriptors and heuristic query, :mod:`sim.compute.cublaslt_host`)
  (``csrc/extensions/gemm.cpp`` 412-482 wraps each expert, ``nvte_multi_stream_cublas_gemm``
  launches each GEMM; MXFP8's scale swizzle is one multi-tensor launch per side, gemm.cpp
  488-491, not per expert).

**Backward, per expert** (``_GroupedLinear.backward``):

* ``restore_from_saved`` of the two quantized tensors: two Python calls under a recipe;
* ``tex.split_quantize`` of the output gradient (l.323): one object, :func:`quantize_launches`;
* ``update_usage`` of the weight copy (l.357-362): one Python call under a recipe;
* the dgrad and the wgrad grouped GEMMs (l.363, l.432): two cuBLASLt launches;
* under NVFP4, before each of its GEMMs (forward too) the per-tensor scale kernel that
  ``cublas_gemm`` launches (:mod:`sim.compute.nvfp4_alpha`): one launch per GEMM;
* ``clear_tensor_data`` of the saved input (l.440): one Python call;
* ``handle_custom_ddp_from_mcore`` (l.442-472): Megatron's DDP sets ``grad_added_to_main_grad``
  (``distributed_data_parallel.py`` 187), so TE returns a dummy ``torch.empty`` wgrad: one
  Python call and one no-grad torch op without a kernel;
* the returned wgrad's ``AccumulateGrad`` node and Megatron DDP's Python hook on that weight
  (``distributed_data_parallel.py`` 570-580): for ``N - 1`` experts (the op counts hold one).

**Prices** (per item on the H100 DGX host, the ``dgx-h100`` preset's own decomposition of its
per-op figure, ``sim/hardware/presets/dgx-h100.yaml``): a C++ kernel launch 3.0 us
(meta-pytorch/tritonbench#1017: raw ``cuLaunchKernel``, "irreducible CUDA driver cost") against
9.8 us for an eager op issued from Python (6.8 us of Python and dispatcher, pytorch/pytorch#41383,
plus the launch); a no-grad torch op without a kernel 5.0 us (#41383 without autograd); a
Python call 2 us (pytorch/pytorch#50431, "~2 microseconds for empty module": the preset's
``module``); an autograd node 13.9 us (the preset's ``backward_op``) and a Python hook 7.5 us
(its ``function_backward``). On another host each kind takes that host's own figure
(:func:`prices`: ``launch``, ``module``, ``nograd_op``, ``backward_op``, ``function_backward``),
so a Grace host (``gb200-nvl72``), whose Python runs about as fast as the x86 reference's,
whose C++ dispatch and autograd about 3x slower and whose bare driver launch was measured at the
reference's 3 us (meta-pytorch/tritonbench#1017, on GB200), prices each kind apart. The
seconds are handed to the engine in that host's forward and backward ops (``op_s``,
``backward_op_s``), which the engine prices back to the same seconds; without a host, in the
reference's (9.8 us, 13.9 us).

**Not counted** (lower bound): C++ per-expert work without a launch
(``makeTransformerEngineTensor`` from Python objects, ``at::from_blob`` views,
``convert_quantizer``, ``at::empty`` allocations: NVIDIA/TransformerEngine#1499 names
``torch.split`` and the ``2 x num_gemms`` ``torch.empty`` calls as ``GroupedLinear``'s CPU
overhead, unmeasured per call), the multi-stream GEMM's event records and waits, and trivial
Python (``set_usage``, the ``main_grad`` lambdas).

**Where it is charged:** on a MoE layer's forward and backward ops, by the rank's shard
(:mod:`sim.parallel.decoder_shard`), for grouped experts under a Transformer Engine recipe or
BF16; not for ``sequential_experts`` (their op counts already loop over the experts) nor
``fused_grouped_mlp`` (TE's fused op runs each grouped GEMM as one kernel over the local
experts, :mod:`sim.compute.moe`). The shard carries it as its own per-layer slot
(``DecoderShard.grouped_ops``, ``StageCost.grouped_ops``), so that a CUDA graph takes it off
only where it captures the experts (:func:`sim.framework.cuda_graphs.module_captured`:
``full_iteration``, ``moe`` in scope, or an empty scope: the whole layer); with ``attn`` (or
``moe_router``) and not ``moe`` it stays, while the layer's other ops lose their attention
half. Within the layer it is issued after the dropless token-count sync
(:attr:`sim.engine.host.LayerPart.after_sync_ops`; the experts run after the dispatch that
waits for the counts), evenly over the pieces after it (with GPT-OSS's offset copy between
fc1 and fc2, one ``GroupedLinear`` on each side: :mod:`sim.compute.glu_clamp`); the layer's
other ops are spread by the device seconds around the syncs.

Assumptions: gradient-accumulation fusion on, the weights' quantized copies cached across
micro-batches. An expert bias (GPT-OSS) adds Megatron-Core's eager bias chain per expert, counted
apart (:mod:`sim.compute.gptoss_host`, :mod:`sim.compute.expert_bias`); TE 2.16's per-expert
``bgrad_quantize`` of a biased MXFP8 ``fc1`` is not counted.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.compute.cublaslt_host import gemm_setup_s
from sim.compute.nvfp4_alpha import alpha_launches
from sim.compute.precision import RECIPES, TE
from sim.compute.precision_rules import TE_VERSION
from sim.compute.quantize import per_expert_casts
from sim.hardware.host_ops import HostOverhead

TE_RECIPES = frozenset(name for name, library in RECIPES if library == TE)
"""The Transformer Engine recipes' names (:data:`sim.compute.precision.RECIPES`)."""


def quantize_launches(recipe: str, te: tuple[int, int] = TE_VERSION) -> int:
    """Quantize kernels per expert tensor of ``split_quantize`` under ``recipe`` (a
    :mod:`sim.compute.precision` name) at Transformer Engine ``te`` (``(major, minor)``): the
    device model's count (:func:`sim.compute.quantize.per_expert_casts`: current scaling
    ("tensorwise") an amax, a scale and a cast; blockwise and MXFP8 one ``nvte_quantize_v2``;
    NVFP4 three before TE 2.11, two at 2.11, none from 2.12, where its kernels are grouped;
    none for delayed scaling, one fused ``nvte_multi_cast_transpose`` for all experts, TE
    @70f5366 cast.cpp 132-143). Unknown recipes count as MXFP8's one.

    >>> quantize_launches("nvfp4", (2, 9)), quantize_launches("nvfp4", (2, 14))
    (3, 0)
    """
    return per_expert_casts(recipe, te) if recipe in TE_RECIPES else 1


LAUNCH_S = 3.0e-6
"""A C++ kernel launch on the reference host (module doc: tritonbench#1017)."""
PY_CALL_S = 2.0e-6
"""A Python call (pytorch#50431; the reference preset's ``module``)."""
NOGRAD_OP_S = 5.0e-6
"""A torch op issued from Python without autograd recording and without a kernel (#41383)."""
NODE_S = 13.9e-6
"""An autograd node the engine runs (the reference preset's ``backward_op``)."""
HOOK_S = 7.5e-6
"""A Python hook the engine calls (the reference preset's ``function_backward``)."""
REF_OP_S = 9.8e-6
"""The reference preset's forward op (``dgx-h100`` ``op``): seconds per forward op handed on."""
REF_BWD_OP_S = 13.9e-6
"""The reference preset's backward op (``dgx-h100`` ``backward_op``)."""


class Prices(NamedTuple):
    """Host seconds per item of each kind of host work :func:`per_expert_s` counts (module doc).

    Attributes:
        launch_s: a kernel launched from C++ (a quantize kernel, a cuBLASLt GEMM).
        py_call_s: a Python call.
        nograd_op_s: a torch op issued from Python without autograd recording and without a
            kernel (the dummy wgrad's ``torch.empty``).
        node_s: an autograd node the engine runs (``AccumulateGrad``).
        hook_s: a Python hook the engine calls (Megatron DDP's gradient hook).
    """

    launch_s: float
    py_call_s: float
    nograd_op_s: float
    node_s: float
    hook_s: float


REFERENCE = Prices(LAUNCH_S, PY_CALL_S, NOGRAD_OP_S, NODE_S, HOOK_S)
"""The reference host's prices (``dgx-h100``, module doc)."""


def prices(host: HostOverhead | None) -> Prices:
    """Each kind at ``host``'s own figure for it (None: :data:`REFERENCE`): a launch at
    :attr:`~sim.hardware.host_ops.HostOverhead.kernel_launch_s`, a Python call at ``module_s``,
    a no-grad op without a kernel at ``nograd_op_s`` (when given) less a launch, a node at
    ``backward_op_s``, a hook at ``function_backward_s``. A kind the host leaves at 0 takes the
    reference price scaled by ``op_s / 9.8 us`` (every host figure scaled alike, as before the
    split). On the reference figures this is :data:`REFERENCE`; on Grace (``gb200-nvl72``) the
    Python kinds scale by CPython's own ratio, the C++ ones by the dispatcher's, and the
    launch is GB200's own measurement (the preset's comment above ``host_overhead``).

    >>> from sim.hardware.host_ops import HostOverhead
    >>> ref = HostOverhead(op_s=9.8e-6, backward_op_s=13.9e-6, nograd_op_s=8e-6, module_s=2e-6,
    ...                    function_backward_s=7.5e-6)
    >>> [round(x * 1e6, 2) for x in prices(ref)]
    [3.0, 2.0, 5.0, 13.9, 7.5]
    >>> [round(x * 1e6, 2) for x in prices(HostOverhead(op_s=19.6e-6))]  # nothing else given
    [6.0, 4.0, 10.0, 27.8, 15.0]
    """
    if host is None:
        return REFERENCE
    scale = host.op_s / REF_OP_S
    launch = host.kernel_launch_s or LAUNCH_S * scale
    nograd = host.nograd_op_s or 0.0
    return Prices(
        launch,
        host.module_s or PY_CALL_S * scale,
        nograd - launch if nograd > launch else NOGRAD_OP_S * scale,
        host.backward_op_s or NODE_S * scale,
        host.function_backward_s or HOOK_S * scale,
    )


def per_expert_s(
    recipe: str | None, host: HostOverhead | None = None, te: tuple[int, int] = TE_VERSION
) -> tuple[float, float]:
    """``(forward, backward)`` host seconds one ``GroupedLinear`` spends per local expert under
    ``recipe`` (a :mod:`sim.compute.precision` name; None: BF16), besides the per-expert
    autograd node and hook (:func:`grouped_linear_s`), each kind at :func:`prices` of ``host``
    (None: the reference host's), at Transformer Engine ``te`` (:func:`quantize_launches`).
    Module doc.

    Each GEMM also pays TE's per-call cuBLASLt set-up (:func:`sim.compute.cublaslt_host.
    gemm_setup_s`, 7 us on the reference host): one in the forward, two in the backward; under
    NVFP4 each GEMM launches its per-tensor scale kernel first (:func:`sim.compute.nvfp4_alpha.
    alpha_launches`): one more launch in the forward, two in the backward.

    Example: MXFP8 forward 4 calls + object + workspace (6 x 2 us) + quantize and GEMM (2 x
    3 us) + the GEMM's set-up (7 us) = 25 us; backward 6 calls (12 us) + dummy
    ``torch.empty`` (5 us) + 3 launches (9 us) + 2 set-ups (14 us) = 40 us.

    >>> [round(x * 1e6, 1) for x in per_expert_s("mxfp8")]
    [25.0, 40.0]
    >>> [round(x * 1e6, 1) for x in per_expert_s(None)]
    [10.0, 29.0]
    """
    p, setup = prices(host), gemm_setup_s(host)
    if recipe is None:
        fwd = p.launch_s + setup  # the GEMM
        bwd = 2 * p.py_call_s + p.nograd_op_s + 2 * (p.launch_s + setup)  # clear, ddp + empty
        return fwd, bwd
    q, a = quantize_launches(recipe, te), alpha_launches(recipe)
    fwd = 6 * p.py_call_s + (q + 1 + a) * p.launch_s + setup
    bwd = 6 * p.py_call_s + p.nograd_op_s + (q + 2 + 2 * a) * p.launch_s + 2 * setup
    return fwd, bwd


def grouped_linear_s(
    local_experts: float,
    recipe: str | None,
    host: HostOverhead | None = None,
    te: tuple[int, int] = TE_VERSION,
) -> tuple[float, float]:
    """``(forward, backward)`` host seconds of one ``GroupedLinear`` with ``local_experts``
    experts beyond the one expert's ops the Megatron-Core counts hold: :func:`per_expert_s`
    for each expert, and an ``AccumulateGrad`` node and Megatron's DDP hook for each expert but
    one (module doc); at ``host``'s prices (None: the reference host's), at Transformer Engine
    ``te``.

    Example: 4 experts, MXFP8: 4 x 25 = 100 us forward; 4 x 40 + 3 x (13.9 + 7.5) = 224.2 us.

    >>> [round(x * 1e6, 1) for x in grouped_linear_s(4, "mxfp8")]
    [100.0, 224.2]
    """
    n = max(0.0, local_experts)
    fwd, bwd = per_expert_s(recipe, host, te)
    p = prices(host)
    return n * fwd, n * bwd + max(0.0, n - 1) * (p.node_s + p.hook_s)


def grouped_expert_ops(
    local_experts: float,
    recipe: str | None,
    linears: int = 2,
    host: HostOverhead | None = None,
    te: tuple[int, int] = TE_VERSION,
) -> tuple[float, float]:
    """``(forward ops, backward ops)`` to add to a MoE layer whose experts run as ``linears``
    ``GroupedLinear`` modules (``TEGroupedMLP``: fc1 and fc2) of ``local_experts`` each: the
    seconds of :func:`grouped_linear_s` at ``host``'s prices per kind, in ``host``'s forward
    and backward op (the engine prices the ops at ``op_s`` and ``backward_op_s``, so the
    seconds come out as priced). None, or a host without per-op figures: the reference
    host's prices and ops (:data:`REF_OP_S`, :data:`REF_BWD_OP_S`; module doc); at Transformer
    Engine ``te`` (:func:`quantize_launches`).

    Example (4 experts, MXFP8): 2 x 100 us / 9.8 us and 2 x 224.2 us / 13.9 us.

    >>> [round(x, 2) for x in grouped_expert_ops(4, "mxfp8")]
    [20.41, 32.26]
    """
    if host is None or host.op_s <= 0 or host.backward_op_s <= 0:
        host, op_s, bwd_op_s = None, REF_OP_S, REF_BWD_OP_S
    else:
        op_s, bwd_op_s = host.op_s, host.backward_op_s
    fwd, bwd = grouped_linear_s(local_experts, recipe, host, te)
    return linears * fwd / op_s, linears * bwd / bwd_op_s


__all__ = [
    "quantize_launches",
    "REFERENCE",
    "Prices",
    "prices",
    "grouped_expert_ops",
    "grouped_linear_s",
    "per_expert_s",
]
