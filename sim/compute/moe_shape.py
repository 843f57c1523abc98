"""The shape of a mixture-of-experts MLP (:class:`MoEShape`): its widths, routing and the
options that decide which kernels run; the kernels themselves and what the layer keeps for its
backward are :mod:`sim.compute.moe`'s (its module doc describes the layer step by step)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware.formats import FP32_BYTES

INDEX_BYTES = 8
"""int64 routing indices (``torch.topk``)."""
PROB_BYTES = FP32_BYTES
"""fp32 routing probabilities (Megatron-LM casts the router's softmax to fp32)."""


@dataclass(frozen=True)
class MoEShape:
    """Shape of a MoE MLP.

    Attributes:
        hidden: ``h``.
        experts: routed experts ``E``.
        top_k: experts per token ``k``.
        expert_ffn: width ``f_e`` of one routed expert.
        shared_ffn: total width ``f_s`` of the shared experts (0: none).
        gated: SwiGLU experts (gate and up projections).
        capacity_factor: tokens each expert keeps per rank, over the balanced share
            (:func:`sim.compute.routing.capacity`); None: dropless.
        pad_to_capacity: every expert computes exactly its capacity (padding).
        bias: biased experts and router (GPT-OSS: ``gate_up_proj_bias`` ``[E, 2f_e]``,
            ``down_proj_bias`` ``[E, h]``, a router bias ``[E]``; HF ``GptOssExperts``): their
            parameters; the up projection's bias is added in the fused activation, the down
            projection's as a chain of memory-bound fp32 kernels (:func:`sim.compute.expert_bias.expert_bias_bytes`).
        latent: the routed experts' latent width ``l`` (:mod:`sim.compute.moe`, "Latent MoE"); 0: none.
        sequential_experts: the local experts run one by one in Python (Megatron-Core's
            ``SequentialMLP``, without ``--moe-grouped-gemm``): the host issues each expert's
            ops (:mod:`sim.compute.mcore_ops`); the kernel model still times them as grouped
            GEMMs. False: one grouped MLP (``GroupedMLP``/``TEGroupedMLP``).
        fused_grouped_mlp: the experts run as Transformer Engine's fused grouped MLP (:mod:`sim.compute.moe`,
            "Fused grouped MLP").
        fused_weighting: the activation and the routing probabilities' product run as one
            fused function that keeps only its input and the probabilities
            (``weighted_bias_swiglu_impl``, ``weighted_bias_quick_geglu_impl``,
            ``weighted_squared_relu_impl``). False: the activation and then
            ``act(x) * probs`` as autograd ops (Megatron-Core's ``TEGroupedMLP.forward``
            ``bias_act_func``, NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/
            experts.py`` lines 943-1016: ``--no-bias-swiglu-fusion``, a GeLU expert, which
            has no fused form, or squared ReLU without ``--use-fused-weighted-squared-relu``):
            the product keeps the activation's output, ``rows*f_e/t*d`` more, and a gated
            one's ``act(gate) * up`` keeps ``act(gate)``, as much again
            (:func:`sim.compute.moe.moe_act_bytes`).
        sort_by_expert: the rank's received rows are sorted by local expert before the experts
            and back after them, as Megatron-Core's ``alltoall`` dispatcher does with more than
            one local expert (:mod:`sim.compute.moe_sort`). False: a flex dispatcher (DeepEP,
            HybridEP) or the all-gather one, which hand the experts rows in expert order.
        hybridep: the flex dispatcher's HybridEP backend (:mod:`sim.compute.hybridep`): no
            Transformer Engine permutation; HybridEP's preprocessing kernel before the dispatch
            (the token-count sync after it) and its own permute and unpermute kernels on the
            receiving rank, over the rows it receives.
        hybridep_domains: NVLink domains HybridEP's group spans (its ``num_of_nodes``); above
            1, each dispatch first copies the rank's input rows (the forward's with the
            probabilities) into the RDMA buffer (:func:`sim.compute.hybridep.rdma_stage`).
        router_fused: the router's top-k and balancing loss as one kernel each way
            (``router_topk``); False: Megatron-Core's unfused router, its eager ops counted
            (:mod:`sim.compute.router_unfused`).
        dglu_regressed: the fused grouped MLP runs under a cuDNN frontend whose dGLU kernel
            with a bias gradient is slow (v1.24, v1.25: :mod:`sim.compute.dglu_regression`);
            it slows the down projection's input gradient only with ``fused_grouped_mlp``
            and ``bias``.
        aux_loss: the router adds an auxiliary balancing loss (``aux_loss`` or
            ``seq_aux_loss`` with a coefficient above 0): with ``router_fused``, Transformer
            Engine's score and loss kernels each way (:mod:`sim.compute.router_fused`).
        random_logits: ``moe_router_force_load_balancing``: with ``router_fused``, the
            random logits' copy and fill (:mod:`sim.compute.router_fused`).
        paged_stash: the fused grouped MLP's saved tensors go through Megatron-Core's paged
            stash (``--moe-paged-stash``): copied into pages after the experts and out of
            them before their backward (:mod:`sim.compute.paged_stash`); only with
            ``fused_grouped_mlp``.
        router_expert_bias: the router keeps a per-expert score bias that the step updates
            from the tokens each expert received (aux-loss-free balancing, Megatron-Core's
            ``moe_router_enable_expert_bias``; Hugging Face DeepSeek-V3's ``topk_method:
            noaux_tc``): its all-reduce and update kernels at the step
            (:mod:`sim.parallel.router_bias`).
        router_score: ``moe_router_score_function``, ``softmax`` (Megatron-Core's default) or
            ``sigmoid``: which ops the unfused router runs (:mod:`sim.compute.router_unfused`).
        router_fp32: ``moe_router_dtype="fp32"``: the unfused router's logits and ops in fp32;
            False: in the model's dtype (:mod:`sim.compute.router_unfused`).
        router_scaled: ``moe_router_topk_scaling_factor`` set: the unfused router multiplies
            the probabilities (:mod:`sim.compute.router_unfused`).
        router_groups: group-limited top-k of the unfused router, ``"G/g"``
            (``moe_router_num_groups``, ``moe_router_group_topk``); ``""``: plain top-k.
        router_deterministic: ``--deterministic-mode``: the unfused router builds its maps
            with ``index_put_`` (:mod:`sim.compute.router_unfused`).
    """

    hidden: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int = 0
    gated: bool = True
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    bias: bool = False
    latent: int = 0
    sequential_experts: bool = False
    fused_grouped_mlp: bool = False
    fused_weighting: bool = True
    sort_by_expert: bool = False
    clamp: bool = False
    hybridep: bool = False
    hybridep_domains: int = 1
    router_fused: bool = True
    dglu_regressed: bool = False
    aux_loss: bool = False
    random_logits: bool = False
    paged_stash: bool = False
    router_expert_bias: bool = False
    router_score: str = "softmax"
    router_fp32: bool = False
    router_scaled: bool = False
    router_groups: str = ""
    router_deterministic: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden", "experts", "top_k", "expert_ffn"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds the {self.experts} experts")
        if self.shared_ffn < 0:
            raise ValueError(f"shared_ffn must be >= 0, got {self.shared_ffn}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0, got {self.capacity_factor}")
        if isinstance(self.hybridep_domains, bool) or not self.hybridep_domains >= 1:
            raise ValueError(f"hybridep_domains must be >= 1, got {self.hybridep_domains!r}")
        if self.router_score not in ("softmax", "sigmoid"):
            raise ValueError(f"router_score must be softmax or sigmoid, got {self.router_score!r}")
        if isinstance(self.latent, bool) or not isinstance(self.latent, int) or self.latent < 0:
            raise ValueError(f"latent must be an integer >= 0, got {self.latent!r}")

    @property
    def row_width(self) -> int:
        """Width of a routed row: the latent ``l``, else ``h`` (:mod:`sim.compute.moe`)."""
        return self.latent or self.hidden

    def latent_params(self) -> int:
        """Parameters of the two latent projections, ``2 h l`` (0 without)."""
        return 2 * self.hidden * self.latent

    @property
    def up_width(self) -> int:
        """Width of an expert's first GEMM: ``2 f_e`` gated, else ``f_e``."""
        return self.expert_ffn * (2 if self.gated else 1)

    def expert_params(self) -> int:
        """Parameters of one routed expert: ``(2 or 3) * h * f_e``, plus ``up + h`` biases."""
        bias = self.up_width + self.row_width if self.bias else 0
        return (self.up_width + self.expert_ffn) * self.row_width + bias

    def shared_params(self) -> int:
        """Parameters of the shared experts: ``(2 or 3) * h * f_s``."""
        return self.shared_ffn * (3 if self.gated else 2) * self.hidden

    def router_params(self) -> int:
        """Router weights ``h * E`` (and ``E`` biases)."""
        return (self.hidden + (1 if self.bias else 0)) * self.experts

    def fwd_flops(self, tokens: int) -> float:
        """Forward FLOPs of the whole layer for ``tokens`` tokens, balanced and dropless:
        router ``2Th E``, routed experts ``2Tk w (up + f_e)`` (``w`` the row width), shared
        ``2Th f_s (2 or 3)``, latent projections ``4Thl``."""
        t, h, w = tokens, self.hidden, self.row_width
        routed = 2.0 * t * self.top_k * w * (self.up_width + self.expert_ffn)
        latent = 2.0 * t * self.latent_params()
        return 2.0 * t * h * self.experts + routed + 2.0 * t * self.shared_params() + latent
