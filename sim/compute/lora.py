"""LoRA adapters on a frozen base model: their kernels, parameters and memory.

LoRA (Hu et al., arXiv:2106.09685, §4.1) freezes the pretrained weights ``W`` and trains a
low-rank update ``W + B A`` per chosen linear layer, ``A: [in, r]``, ``B: [r, out]``, applied as
``y = x W + (x A) B * alpha/r`` (Hugging Face PEFT ``peft/tuners/lora/layer.py::Linear.forward``;
NeMo / Megatron-Bridge ``LinearAdapter``). What changes in a training step:

* **parameters**: every base weight stays (its bytes are in the layer's ``param_bytes``), the
  adapters add ``r*(in + out)`` per target; only the adapters are trainable, so only they have
  gradients and optimizer state (:attr:`~sim.trace.schema.LayerProfile.trainable_bytes`);
* **forward**: per target two GEMMs ``[T, in] @ [in, r]`` and ``[T, r] @ [r, out]`` and the
  scaled add into the base output (``3*T*out*d`` bytes);
* **backward**: the input gradient still flows through every frozen GEMM (``dX = dY W^T``) and
  through the adapter (``dY B^T`` then ``@ A^T``, added into ``dX``); the frozen weights'
  gradients ``X^T dY`` are not computed (``requires_grad=False``): a frozen model's weight-
  gradient kernels disappear and the adapters' ``dA``, ``dB`` take their place. The embedding,
  whose whole backward is its weight gradient, runs no backward;
* **activations**: the base layers keep what they kept (an upper bound: autograd does not save
  the input of a frozen linear layer unless another op needs it), plus each adapter's ``x A``
  (``T*r*d``), which ``dB`` needs.

Targets use Hugging Face's module names: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` (the
attention projections) and ``gate_proj``, ``up_proj``, ``down_proj`` (a dense MLP; on a MoE
block the experts are not adapted, an assumption). Under tensor parallelism an adapter is split
as its base layer (column-parallel targets: ``B`` split, row-parallel: ``A`` split; the
replicated half is counted split too, an approximation of ``r*in`` elements per target).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.compute.kernels import Kernel, gemm, mem

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS
DEFAULT_TARGETS = ("q_proj", "v_proj")
"""PEFT's default for Llama-like models (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``:
``llama: ["q_proj", "v_proj"]``)."""
ROW_PARALLEL = ("o_proj", "down_proj")


@dataclass(frozen=True)
class LoRAShape:
    """LoRA on a frozen base (module doc).

    Attributes:
        rank: ``r``.
        targets: the adapted linear layers (Hugging Face names, :data:`TARGETS`).
    """

    rank: int
    targets: tuple[str, ...] = DEFAULT_TARGETS

    def __post_init__(self) -> None:
        r = self.rank
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"lora.rank must be a positive integer, got {r!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        bad = [t for t in self.targets if t not in TARGETS]
        if bad or not self.targets:
            raise ValueError(
                f"lora.targets must be a non-empty list of {', '.join(TARGETS)}; got {bad or '[]'}"
            )


Linear = tuple[str, int, int]
"""``(target, in, out)`` of an adapted linear layer, unsharded."""


def adapted(lora: LoRAShape, linears: list[Linear]) -> list[Linear]:
    """The ``linears`` of a layer that ``lora`` adapts."""
    return [x for x in linears if x[0] in lora.targets]


def adapter_params(lora: LoRAShape, linears: list[Linear]) -> int:
    """Trainable parameters of a layer's adapters: ``r*(in + out)`` per target.

    Example (Llama-2-7B attention, q and v adapted at rank 8: 2 x 8 x 8192):
        >>> adapter_params(LoRAShape(8), [("q_proj", 4096, 4096), ("v_proj", 4096, 4096)])
        131072
    """
    return sum(lora.rank * (i + o) for _, i, o in adapted(lora, linears))


def _local(name: str, i: int, o: int, tp: int) -> tuple[int, int]:
    return (i // tp, o) if name in ROW_PARALLEL else (i, o // tp)


def lora_fwd(lora: LoRAShape, linears: list[Linear], t: int, d: int, tp: int = 1) -> list[Kernel]:
    """Forward kernels of a layer's adapters over ``t`` tokens on one of ``tp`` ranks."""
    r, out = lora.rank, []
    for name, i0, o0 in adapted(lora, linears):
        i, o = _local(name, i0, o0, tp)
        out += [gemm(f"lora_{name}_a", t, r, i, d), gemm(f"lora_{name}_b", t, o, r, d)]
        out.append(mem(f"lora_{name}_add", 3 * t * o * d))
    return out


def lora_bwd(
    lora: LoRAShape, linears: list[Linear], t: int, d: int, tp: int = 1
) -> tuple[list[Kernel], list[Kernel]]:
    """``(input_gradient, weight_gradient)`` kernels of a layer's adapters (module doc)."""
    r, dx, dw = lora.rank, [], []
    for name, i0, o0 in adapted(lora, linears):
        i, o = _local(name, i0, o0, tp)
        dx += [gemm(f"d_lora_{name}_b_in", t, r, o, d), gemm(f"d_lora_{name}_a_in", t, i, r, d)]
        dx.append(mem(f"d_lora_{name}_add", 3 * t * i * d))
        dw += [gemm(f"d_lora_{name}_b_w", r, o, t, d), gemm(f"d_lora_{name}_a_w", i, r, t, d)]
    return dx, dw


def lora_act_bytes(lora: LoRAShape, linears: list[Linear], t: int, d: int) -> float:
    """Bytes the adapters add to a layer's stash: ``x A`` per target, ``t*r*d``."""
    return float(len(adapted(lora, linears)) * t * lora.rank * d)
