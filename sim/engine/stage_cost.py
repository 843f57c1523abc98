"""One stage's per-micro-batch compute and boundary sizes (:class:`StageCost`): what the engine
charges a forward, a backward (B, or its I and W parts) and a recompute, and what a stage sends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.engine.host import LayerPart
from sim.parallel.ops import GroupOp
from sim.parallel.tp_overlap import OverlapOp
from sim.trace.schema import LayerProfile

DEFAULT_INPUT_SHARE = 0.5
"""Share of a backward that is its input gradient (I) when a trace lacks ``bwd_input_s`` /
``bwd_weight_s``: an assumption. A transformer layer's input-gradient and weight-gradient GEMMs
have the same FLOPs (each equals the forward's), and Zero Bubble's schedules are designed for
``T_I = T_W`` (Qi et al. ICLR'24 §2; schedules.md §2.7)."""


@dataclass(frozen=True)
class StageCost:
    """Per-micro-batch compute and boundary sizes of one stage.

    Attributes:
        fwd_s: forward seconds.
        bwd_s: backward seconds (B, or I + W).
        out_bytes: bytes of the activation this stage sends to the next one.
        in_bytes: bytes of the activation it receives (the gradient it sends back).
        tp_fwd: tensor-parallel collectives of a forward, ``(kind, bytes each, count)``
            (:func:`sim.parallel.megatron.aggregate`); empty without tensor parallelism.
        tp_bwd: the same for a backward (B, or I).
        tp_recompute: the same for the recompute before a backward: the collectives of the
            fully checkpointed layers' forwards (Megatron's ``CheckpointFunction.backward``
            re-runs the forward, its ``all_reduce``s included); set from the memory plan.
        bwd_input_s: seconds of the input-gradient part I of a split backward; None when the
            trace does not split it (then :attr:`input_s` assumes half of ``bwd_s``).
        bwd_weight_s: seconds of the weight-gradient part W; None likewise.
        group_fwd: expert- and context-parallel exchanges of a forward
            (:class:`~sim.parallel.ops.GroupOp`, :mod:`sim.engine.groups`); empty without.
        group_bwd: the same for a backward (B, or I).
        expert_grad_share: fraction of the stage's gradients that belong to routed experts:
            reduced over the expert-data-parallel group only (:mod:`sim.parallel.expert`).
        fwd_ops: ops the host issues for a forward (the layers' ``fwd_ops``; 0 if unknown).
        bwd_ops: ops the autograd engine dispatches for a backward (``bwd_ops``); an I and a
            W get shares of them in proportion to their seconds (an assumption).
        fwd_layers: ``(seconds, ops, module calls, Function applies, Transformer Engine
            modules)`` of each layer's forward, in order (the last set by a framework that runs
            TE: :meth:`sim.framework.base.Framework.host_captured`), so that the host model summarises a forward layer by layer
            (:meth:`forward_parts`); empty: one summary of the whole stage.
        bwd_layers: ``(seconds, ops, Python backward nodes)`` of each layer's backward, in
            forward order.
        fwd_syncs: per layer, the shares of its forward issued before each host sync inside
            it, in order (a MoE layer's token counts read on the host, a clamped quick-GeGLU's
            offset copy: :data:`sim.compute.moe.HOST_SYNC_KERNELS`), empty without one; empty:
            none. The host waits there for the
            device (:meth:`sim.hardware.host_ops.HostWork.sync`), in the forward and in a
            recompute of it.
        param_tensors: ``(vectors, matrices)``: parameter tensors of the stage as one tensor
            rank holds them (biases and norm weights; weight matrices and embeddings), for a
            step that checks them one by one (:attr:`PipelineRuntime.overflow_check_ops`).
        tp_fwd_overlap: tensor-parallel collectives of a forward that run beside their GEMMs
            (:class:`~sim.parallel.tp_overlap.OverlapOp`: a framework's TP overlap), not in
            ``tp_fwd``; empty without.
        tp_bwd_overlap: the same for a backward (B, or I).
        tp_recompute_overlap: the same for the recompute before a backward.
        grouped_ops: per layer, ``(forward ops, backward ops)`` of a MoE layer's grouped
            experts' per-expert host work (:func:`sim.parallel.layer_host.grouped_host_ops`),
            already counted in :attr:`fwd_layers` and :attr:`bwd_layers`: its own slot, so
            that a CUDA graph scope removes it only when it captures the experts
            (:func:`sim.framework.cuda_graphs.captured`); empty: none.
        attn_ops: per layer, ``(forward ops, backward ops)`` inside its attention module
            that the generic layer counts lack (GPT-OSS's eager RoPE and projection bias,
            :func:`sim.parallel.layer_host.attention_host_ops`), already counted in
            :attr:`fwd_layers` and :attr:`bwd_layers`: a CUDA graph of the attention takes
            them whole; empty: none.
        bwd_accumulate: per layer (forward order), device seconds a backward after an
            iteration's first micro-batch adds for accumulating the layer's weight gradients
            into ``.grad`` (PyTorch's ``AccumulateGrad`` in-place add, where the framework keeps
            ``.grad`` across micro-batches: :meth:`accumulating`); empty: none.
        tp_fwd_layers: per layer, the tensor-parallel collectives of its forward in issue
            order, ``(kind, bytes)`` each (:class:`~sim.parallel.megatron.LayerComm`'s
            ``fwd``); empty: not given.
        fwd_sync_drains: per layer, how many of the first :attr:`tp_fwd_layers` its first host
            sync (:attr:`fwd_syncs`) waits for: collectives issued before the sync, whose
            output the compute stream waits on before its next kernel, so that the host's
            wait there drains them too (:meth:`drained`); empty: none.
        fwd_sync_reads: per layer, per host sync of :attr:`fwd_syncs` (same order), the
            blocking host-device copies of a few bytes made there
            (:attr:`sim.engine.host.LayerPart.sync_reads`), in the forward and in a recompute
            of it; empty: none.
        bwd_syncs: per layer, the share of its backward issued before a host sync inside it
            (a ``moe_act`` recompute's offset copy,
            :func:`sim.parallel.layer_host.recompute_sync_share`), 0.0 for none; empty: none.
        tp_summed_params: parameters of the stage, whole on each tensor rank, whose gradients
            Megatron-Core's ``finalize_model_grads`` all-reduces over the tensor group at the
            step (norms with sequence parallelism, QK-norms: :mod:`sim.parallel.finalize_grads`;
            bytes: :attr:`~sim.engine.inputs.PipelineRuntime.tp_grad_elem_bytes` each); 0: none.
        router_bias_experts: per MoE router of the stage with an expert bias, its experts
            (Megatron-Core's expert-bias update at the step: :mod:`sim.parallel.router_bias`);
            empty: none.
        recompute_skip_s: per layer (forward order), seconds of its forward that a full
            recompute does not add: kernels that run only with gradients enabled, which the
            checkpointed first forward skips and the recompute runs
            (:attr:`~sim.trace.schema.LayerProfile.full_recompute_s`); empty: none.
    """

    fwd_s: float
    bwd_s: float
    out_bytes: float
    in_bytes: float
    tp_fwd: tuple[tuple[str, float, int], ...] = ()
    tp_bwd: tuple[tuple[str, float, int], ...] = ()
    tp_recompute: tuple[tuple[str, float, int], ...] = ()
    bwd_input_s: float | None = None
    bwd_weight_s: float | None = None
    group_fwd: tuple[GroupOp, ...] = ()
    group_bwd: tuple[GroupOp, ...] = ()
    expert_grad_share: float = 0.0
    fwd_ops: float = 0.0
    bwd_ops: float = 0.0
    fwd_layers: tuple[tuple[float, float, float, float, float], ...] = ()
    bwd_layers: tuple[tuple[float, float, float], ...] = ()
    fwd_syncs: tuple[tuple[float, ...], ...] = ()
    param_tensors: tuple[int, int] = (0, 0)
    tp_fwd_overlap: tuple[OverlapOp, ...] = ()
    tp_bwd_overlap: tuple[OverlapOp, ...] = ()
    tp_recompute_overlap: tuple[OverlapOp, ...] = ()
    grouped_ops: tuple[tuple[float, float], ...] = ()
    attn_ops: tuple[tuple[float, float], ...] = ()
    bwd_accumulate: tuple[float, ...] = ()
    tp_fwd_layers: tuple[tuple[tuple[str, float], ...], ...] = ()
    fwd_sync_drains: tuple[int, ...] = ()
    fwd_sync_reads: tuple[tuple[float, ...], ...] = ()
    bwd_syncs: tuple[float, ...] = ()
    tp_summed_params: float = 0.0
    router_bias_experts: tuple[int, ...] = ()
    recompute_skip_s: tuple[float, ...] = ()

    def drained(self, i: int) -> tuple[tuple[str, float], ...]:
        """The collectives of layer ``i``'s forward that its first host sync waits for
        (:attr:`fwd_sync_drains`), in issue order; empty without a sync or without them.

        Example:
            >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_syncs=((0.7,), ()),
            ...               tp_fwd_layers=((("allreduce", 8.0),) * 2,) * 2,
            ...               fwd_sync_drains=(1, 1))
            >>> c.drained(0), c.drained(1)
            ((('allreduce', 8.0),), ())
        """
        if not self.sync_share(i) or i >= len(self.fwd_sync_drains):
            return ()
        ops = self.tp_fwd_layers[i] if i < len(self.tp_fwd_layers) else ()
        return ops[: self.fwd_sync_drains[i]]

    def accumulating(self) -> StageCost:
        """This cost as a backward after an iteration's first micro-batch runs it: each layer's
        :attr:`bwd_accumulate` seconds added to its :attr:`bwd_layers` entry and their sum to
        :attr:`bwd_s` (and to :attr:`bwd_weight_s` when split: the weights' gradients);
        itself without any.

        Example:
            >>> c = StageCost(1.0, 2.0, 0.0, 0.0, bwd_layers=((1.0, 20.0, 0.0),) * 2,
            ...               bwd_accumulate=(0.25, 0.5))
            >>> d = c.accumulating()
            >>> d.bwd_s, [x[0] for x in d.bwd_layers], d.bwd_accumulate
            (2.75, [1.25, 1.5], ())
        """
        if not self.bwd_accumulate:
            return self
        total = sum(self.bwd_accumulate)
        add = [self.bwd_accumulate[i] if i < len(self.bwd_accumulate) else 0.0
               for i in range(len(self.bwd_layers))]  # fmt: skip
        return replace(
            self,
            bwd_s=self.bwd_s + total,
            bwd_weight_s=None if self.bwd_weight_s is None else self.bwd_weight_s + total,
            bwd_layers=tuple(
                (sec + x, ops, nodes)
                for (sec, ops, nodes), x in zip(self.bwd_layers, add, strict=True)
            ),
            bwd_accumulate=(),
        )

    def with_layer_ops(self, fwd: Sequence[float], bwd: Sequence[float] = ()) -> StageCost:
        """This cost with ``fwd[i]`` more forward ops on layer ``i`` of :attr:`fwd_layers` and
        ``bwd[i]`` more backward ops on layer ``i`` of :attr:`bwd_layers` (a missing entry adds
        none, entries beyond the layers are ignored), and :attr:`fwd_ops` and :attr:`bwd_ops`
        raised by what the layers got.

        Example:
            >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2,
            ...               bwd_layers=((1.0, 20.0, 0.0),) * 2)
            >>> d = c.with_layer_ops([0.0, 5.0, 7.0], [3.0])
            >>> [x[1] for x in d.fwd_layers], [x[1] for x in d.bwd_layers], d.fwd_ops, d.bwd_ops
            ([10.0, 15.0], [23.0, 20.0], 5.0, 3.0)
        """
        f = [fwd[i] if i < len(fwd) else 0.0 for i in range(len(self.fwd_layers))]
        b = [bwd[i] if i < len(bwd) else 0.0 for i in range(len(self.bwd_layers))]
        return replace(
            self,
            fwd_layers=tuple(
                (sec, ops + x, mods, fns, te)
                for (sec, ops, mods, fns, te), x in zip(self.fwd_layers, f, strict=True)
            ),
            bwd_layers=tuple(
                (sec, ops + x, nodes)
                for (sec, ops, nodes), x in zip(self.bwd_layers, b, strict=True)
            ),
            fwd_ops=self.fwd_ops + sum(f),
            bwd_ops=self.bwd_ops + sum(b),
        )

    def forward_parts(
        self, checkpointed: tuple[int, ...], drain_s: Sequence[float] = ()
    ) -> tuple[LayerPart, ...]:
        """Each layer's forward (:class:`~sim.engine.host.LayerPart`), in issue order; the
        ``checkpointed`` layers (indices in the stage) run without autograd recording;
        ``drain_s[i]``: seconds of layer ``i``'s collectives its first sync waits for
        (:meth:`drained`, timed by the engine; missing: 0)."""
        full = set(checkpointed)
        return tuple(
            self._forward_part(i, i in full, drain_s[i] if i < len(drain_s) else 0.0)
            for i in range(len(self.fwd_layers))
        )

    def _forward_part(self, i: int, nograd: bool, drain_s: float = 0.0) -> LayerPart:
        """Layer ``i``'s forward; ``nograd``: run without autograd recording (its ops are also
        its ``nograd_ops``); ``drain_s``: :attr:`~sim.engine.host.LayerPart.drain_s`."""
        sec, ops, mods, fns, te = self.fwd_layers[i]
        reads = self.fwd_sync_reads[i] if i < len(self.fwd_sync_reads) else ()
        return LayerPart(sec, ops, ops if nograd else 0.0, mods, fns, te, self.sync_share(i),
                         self.grouped_fwd(i), drain_s, reads)  # fmt: skip

    def sync_share(self, i: int) -> tuple[float, ...]:
        """The shares of layer ``i``'s forward before its host syncs (:attr:`fwd_syncs`;
        empty)."""
        return self.fwd_syncs[i] if i < len(self.fwd_syncs) else ()

    def grouped_fwd(self, i: int) -> float:
        """Forward ops of layer ``i``'s grouped experts' host work (:attr:`grouped_ops`; 0),
        issued after its first host sync (:attr:`sim.engine.host.LayerPart.after_sync_ops`)."""
        return self.grouped_ops[i][0] if i < len(self.grouped_ops) else 0.0

    def recompute_parts(
        self, checkpointed: tuple[int, ...], drain_s: Sequence[float] = ()
    ) -> tuple[LayerPart, ...]:
        """The forwards of the ``checkpointed`` layers, run again before a backward, in forward
        order (Megatron recomputes each layer when the backward reaches it; their issue order
        does not change the max-plus summary's host and device sums, only its span);
        ``drain_s``: as in :meth:`forward_parts`, indexed by layer; each less its
        :attr:`recompute_skip_s`.

        Example:
            >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2,
            ...               recompute_skip_s=(0.0, 0.125))
            >>> [p.device_s for p in c.recompute_parts((0, 1))]
            [0.5, 0.375]
        """
        skip = self.recompute_skip_s
        return tuple(
            self._forward_part(i, False, drain_s[i] if i < len(drain_s) else 0.0)._replace(
                device_s=self.fwd_layers[i][0] - (skip[i] if i < len(skip) else 0.0)
            )
            for i in sorted(checkpointed)
        )

    def backward_layer_parts(self) -> tuple[LayerPart, ...]:
        """Each layer's backward in forward order, with its forward's Transformer Engine
        modules (each runs its Python backward too; none when the stage has no per-layer
        forward, :attr:`fwd_layers` empty), and its host sync (:attr:`bwd_syncs`) if any.

        Raises:
            ValueError: :attr:`fwd_layers` and :attr:`bwd_layers` are both given but not one
                per layer each (zip's strict check)."""
        te = [x[4] for x in self.fwd_layers] if self.fwd_layers else [0.0] * len(self.bwd_layers)
        syncs = [self.bwd_syncs[i] if i < len(self.bwd_syncs) else 0.0 for i in range(len(te))]
        return tuple(
            LayerPart(sec, ops, 0.0, 0.0, nodes, t, (k,) if k > 0 else ())
            for (sec, ops, nodes), t, k in zip(self.bwd_layers, te, syncs, strict=True)
        )

    def backward_parts(self) -> tuple[LayerPart, ...]:
        """Each layer's backward, in the order autograd runs them (last layer first)."""
        return tuple(reversed(self.backward_layer_parts()))

    def backward_ops(self, op: str) -> float:
        """Backward ops of a ``B``, ``I`` or ``W`` action (I and W: shares of ``bwd_ops`` in
        proportion to their seconds)."""
        if op == "B" or self.bwd_s <= 0:
            return self.bwd_ops if op == "B" else self.bwd_ops / 2
        share = self.input_s if op == "I" else self.weight_s
        return self.bwd_ops * share / self.bwd_s

    @property
    def input_s(self) -> float:
        """Seconds of an I action: ``bwd_input_s``, or the assumption ``bwd_s / 2``
        (:data:`DEFAULT_INPUT_SHARE`) when the trace lacks the split."""
        return self.bwd_s * DEFAULT_INPUT_SHARE if self.bwd_input_s is None else self.bwd_input_s

    @property
    def weight_s(self) -> float:
        """Seconds of a W action: ``bwd_weight_s``, or ``bwd_s - input_s``."""
        return self.bwd_s - self.input_s if self.bwd_weight_s is None else self.bwd_weight_s

    @property
    def has_split(self) -> bool:
        """Whether I and W times come from the trace (not the default assumption)."""
        return self.bwd_input_s is not None and self.bwd_weight_s is not None

    @classmethod
    def from_layers(cls, layers: tuple[LayerProfile, ...], in_bytes: float) -> StageCost:
        """Sum of the layers' forward and backward seconds; the last layer's output bytes.

        The I/W split is summed when every layer has both ``bwd_input_s`` and
        ``bwd_weight_s``; otherwise it is left None (the default assumption applies)."""
        split = all(x.bwd_input_s is not None and x.bwd_weight_s is not None for x in layers)
        skip = tuple(x.fwd_s - x.full_recompute_s for x in layers)
        return cls(
            sum(x.fwd_s for x in layers),
            sum(x.bwd_s for x in layers),
            layers[-1].out_bytes,
            in_bytes,
            bwd_input_s=sum(x.bwd_input_s or 0.0 for x in layers) if split else None,
            bwd_weight_s=sum(x.bwd_weight_s or 0.0 for x in layers) if split else None,
            fwd_ops=sum(x.fwd_ops or 0.0 for x in layers),
            bwd_ops=sum(x.bwd_ops or 0.0 for x in layers),
            fwd_layers=tuple(
                (x.fwd_s, x.fwd_ops or 0.0, x.fwd_modules or 0.0, x.fwd_functions or 0.0, 0.0)
                for x in layers
            ),
            bwd_layers=tuple((x.bwd_s, x.bwd_ops or 0.0, x.fwd_functions or 0.0) for x in layers),
            recompute_skip_s=skip if any(skip) else (),
        )
