"""The host as a second queue: what issuing ops costs the CPU, and when the device can run them.

An eager PyTorch process issues every op from one CPU thread (Python, the dispatcher, autograd
recording, the CUDA launch) and the GPU runs the ops in issue order, each once it has been
issued and its predecessor is done; the host does not wait for the device unless something
synchronises it (a blocking wait). A stream therefore advances at the slower of the two, and the
host may run ahead of the device (Paszke et al., "PyTorch: An Imperative Style, High-Performance
Deep Learning Library", NeurIPS 2019, §5.3 "asynchronous execution"; the PyTorch CUDA graphs
blog, pytorch.org/blog/accelerating-pytorch-with-cuda-graphs, 2021: "at small batch sizes CPU
overhead can become larger than GPU run time ... GPUs go idle between kernel calls").

For a sequence of ``n`` ops with host costs ``h_i`` and device costs ``d_i``, issued by a host
that is free at ``H0`` to a device that is free at ``D0``, op ``i`` is issued at
``H0 + h_1 + ... + h_i`` and starts at the later of that and the end of op ``i - 1``, so the
last op ends at (max-plus algebra, proved by induction on ``n``)::

    device_end = max(D0 + sum(d), H0 + K),  K = max_i (h_1 + ... + h_i + d_i + ... + d_n)
    host_end   = H0 + sum(h)

:class:`HostWork` is that summary ``(sum h, sum d, K)`` of a sequence; two sequences issued one
after the other compose as ``K = max(K_a + d_b, h_a + K_b)`` (:meth:`HostWork.then`), so a
stage's action is summarised once and the engine keeps one host clock per rank
(:mod:`sim.engine.host`). Within a layer the ops are taken as alike (each ``H/n`` on the host
and ``D/n`` on the device, an assumption: a trace records a layer's totals, not each op), which
gives ``K = max(H + D/n, D + H/n)``.

**A host sync inside a sequence** (``.item()``, ``.tolist()``, an event's ``synchronize()``:
Megatron-Core's MoE token dispatchers read the token counts on the host before they can size
the exchange, :mod:`sim.compute.moe`) blocks the host until the device has run everything
issued before it; the ops after it start with both free at that time, so the host's lead over
the device is lost there (:meth:`HostWork.sync`). Then the host's end depends on the device's
start as well: ``host_end = max(H0 + sum h, D0 + L)``. The summary is the max-plus matrix of
the sequence, ``[device_end, host_end] = [[A, K], [L, sum h]] (x) [D0, H0]``, with ``A =
sum d`` and ``L = -inf`` without a sync; sequences compose as max-plus matrix products
(:meth:`HostWork.then`).

:class:`HostOverhead` is the per-op host cost of a server's CPU running eager PyTorch, from the
hardware description (measured by ``sim calibrate``, or the sourced defaults of the presets),
and the per-call cost of the Python around the ops: ``nn.Module`` calls, ``autograd.Function``
applies and their Python backward nodes (:meth:`HostOverhead.calls_s`), which a layer's trace
counts (``fwd_modules``, ``fwd_functions``). Every framework pipesim models runs its layers as
eager modules; torchtitan's ``torch.compile`` (off by default, ``--compile.enable``) would trace
them away, which is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MODES = ("eager", "cuda_graphs")
"""``eager``: every op costs the host ``op_s`` (``backward_op_s`` in a backward).
``cuda_graphs``: the captured region is replayed by one ``cudaGraphLaunch``, which "skips all
layers of argument setup and kernel dispatch, including Python, C++, and CUDA driver
overheads" (PyTorch CUDA graphs blog, 2021): per-op host cost 0."""


@dataclass(frozen=True, slots=True)
class HostWork:
    """The max-plus summary of a sequence of ops (module doc).

    Attributes:
        host_s: seconds the host spends issuing them (``sum h``).
        device_s: seconds the device spends running them (``sum d``).
        span_s: ``K``: the device finishes no earlier than ``H0 + K`` (``K >= device_s``).
        device_span_s: ``A``: the device finishes no earlier than ``D0 + A``; None:
            ``device_s``, which it is unless a host sync inside lets the device idle while the
            host issues what follows the sync (module doc).
        lag_s: ``L``: the host finishes no earlier than ``D0 + L`` (a host sync inside waited
            for the device); ``-inf`` without one.
        host_span_s: ``E``: the host finishes no earlier than ``H0 + E``; None: ``host_s``,
            which it is unless a host sync inside waited for ops issued before it.
    """

    host_s: float
    device_s: float
    span_s: float
    device_span_s: float | None = None
    lag_s: float = -math.inf
    host_span_s: float | None = None

    @classmethod
    def device_only(cls, device_s: float) -> HostWork:
        """Ops that cost the host nothing: ``(0, d, d)``."""
        return cls(0.0, device_s, device_s)

    @classmethod
    def of_ops(cls, ops: float, host_s: float, device_s: float) -> HostWork:
        """``ops`` alike ops totalling ``host_s`` and ``device_s`` (module doc):
        ``K = max(H + D/n, D + H/n)``; fewer than one op counts as one."""
        n = max(1.0, ops)
        return cls(host_s, device_s, max(host_s + device_s / n, device_s + host_s / n))

    @classmethod
    def sync(cls) -> HostWork:
        """A host sync: the host waits until the device has run everything issued before it
        (module doc); the matrix ``[[0, 0], [0, 0]]``: both are free at ``max(D0, H0)``."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @property
    def matrix(self) -> tuple[float, float, float, float]:
        """``(A, K, L, E)``, the max-plus matrix ``[[A, K], [L, E]]`` (module doc)."""
        a = self.device_s if self.device_span_s is None else self.device_span_s
        e = self.host_s if self.host_span_s is None else self.host_span_s
        return a, self.span_s, self.lag_s, e

    def then(self, other: HostWork) -> HostWork:
        """This sequence, then ``other`` issued right after it (associative: the max-plus
        product of the two matrices, module doc).

        Example: a device-bound op (host 1, device 2), a sync, then a host-bound one (host 3,
        device 1), both free at 0: the device runs 1-3 and, after the host has waited for it
        and issued the second op, 6-7; the host ends at 6.

        >>> w = HostWork.of_ops(1, 1.0, 2.0).then(HostWork.sync())
        >>> w = w.then(HostWork.of_ops(1, 3.0, 1.0))
        >>> w.finish(0.0, 0.0), w.finish(10.0, 0.0), w.device_s
        ((7.0, 6.0), (17.0, 16.0), 3.0)
        """
        a1, k1, l1, e1 = self.matrix
        a2, k2, l2, e2 = other.matrix
        a, e = max(a2 + a1, k2 + l1), max(l2 + k1, e2 + e1)
        host, device = self.host_s + other.host_s, self.device_s + other.device_s
        return HostWork(
            host,
            device,
            max(a2 + k1, k2 + e1),
            None if a == device else a,
            max(l2 + a1, e2 + l1),
            None if e == host else e,
        )

    def finish(self, host_free_s: float, device_free_s: float) -> tuple[float, float]:
        """``(device_end_s, host_end_s)`` when the host is free at ``host_free_s`` and the
        device at ``device_free_s`` (module doc)."""
        a, k, lag, e = self.matrix
        return (max(device_free_s + a, host_free_s + k),
                max(host_free_s + e, device_free_s + lag))  # fmt: skip


def issue_exactly(
    host_s: list[float], device_s: list[float], host_free_s: float, device_free_s: float
) -> tuple[float, float]:
    """``(device_end_s, host_end_s)`` of ops issued one by one: the reference the closed form
    of :class:`HostWork` is tested against."""
    host, device = host_free_s, device_free_s
    for h, d in zip(host_s, device_s, strict=True):
        host += h
        device = max(device, host) + d
    return device, host


LAUNCH_SHARE = 3.0 / 9.8
"""The kernel launch's share of an eager op on the reference host (``dgx-h100``: 9.8 us per op
= 6.8 us of Python, dispatcher and autograd recording, pytorch/pytorch#41383, + 3.0 us of raw
``cuLaunchKernel``, meta-pytorch/tritonbench#1017, measured on GB200): a host's :attr:`HostOverhead.launch_s` when
its description gives none."""


@dataclass(frozen=True)
class HostOverhead:
    """Host seconds per op of eager PyTorch on one server's CPU.

    Attributes:
        op_s: per op of a forward (Python, dispatcher, autograd recording, the kernel launch),
            with ops counted as the trace counts them (``fwd_ops``: the ATen ops a
            ``TorchDispatchMode`` sees, :mod:`sim.trace.schema`).
        backward_op_s: per op the autograd engine dispatches in a backward (``bwd_ops``).
        nograd_op_s: per op of a forward run without autograd recording: the first forward
            of a checkpointed region (Megatron's ``CheckpointFunction`` and torch's reentrant
            ``checkpoint`` run it under ``torch.no_grad()``); None: ``op_s``.
        checkpoint_s: per checkpointed region and micro-batch: the activation-checkpoint
            wrapper's own work (saving and restoring RNG states, detaching inputs, re-entering
            autograd), besides the ops it re-runs.
        read_s: per blocking read of a device scalar (``float(t)``, ``.item()``) besides its
            op: the device-to-host copy of a few bytes and the wait for it, after the device
            has finished what was issued before (:meth:`serial_reads_s`).
        module_s: per ``nn.Module`` call (``_call_impl`` and the Python ``forward`` call),
            besides the ops it issues (:meth:`calls_s`).
        function_s: per custom ``torch.autograd.Function.apply`` (building its graph node, the
            Python ``forward``), besides the ops it issues.
        function_backward_s: per Python backward node the autograd engine calls (one per
            ``Function`` applied with autograd recording), besides the ops it issues.
        te_module_s: per forward of a Transformer Engine module (``te.Linear``,
            ``LayerNormLinear``, ``GroupedLinear``): the host time its Python (``prepare_forward``,
            the recipe and dtype checks, its ``autograd.Function``'s argument handling) adds
            over the ``torch.nn.Linear`` forward the trace's ops count, and again in its
            backward (:meth:`calls_s`)
            (:data:`sim.compute.mcore_ops.TE_MODULES`; NVIDIA/TransformerEngine#2053 measured both on
            GB200, GH200 and an H100 DGX; the extra is Python, so it moves between hosts as
            ``module_s`` does: :mod:`sim.framework.te_host`).
        launch_s: per kernel launched from C++ without a Python-level op around it (a CUDA
            driver ``cuLaunchKernel``, a cuBLASLt GEMM inside an extension's loop: what
            :mod:`sim.compute.te_grouped_host` charges per expert); None: the reference split of
            ``op_s`` (:data:`LAUNCH_SHARE` of it, the launch in dgx-h100's 9.8 us op).
        mode: one of :data:`MODES`.
        cpu: the host CPU these numbers belong to (e.g. ``AMD EPYC 7742``).
        source: where the numbers come from (measurement or citation, with assumptions).

    Raises:
        ValueError: a negative cost or an unknown mode.

    Example:
        >>> h = HostOverhead(op_s=10e-6, backward_op_s=5e-6)
        >>> round(h.forward_s(60) * 1e6), round(h.under("cuda_graphs").forward_s(60) * 1e6)
        (600, 0)
    """

    op_s: float = 0.0
    backward_op_s: float = 0.0
    checkpoint_s: float = 0.0
    nograd_op_s: float | None = None
    mode: str = "eager"
    cpu: str = ""
    source: str = ""
    read_s: float = 0.0
    module_s: float = 0.0
    function_s: float = 0.0
    function_backward_s: float = 0.0
    te_module_s: float = 0.0
    launch_s: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "op_s",
            "backward_op_s",
            "checkpoint_s",
            "nograd_op_s",
            "read_s",
            "module_s",
            "function_s",
            "function_backward_s",
            "te_module_s",
            "launch_s",
        ):
            v = getattr(self, name)
            if v is None and name in ("nograd_op_s", "launch_s"):
                continue
            if not v >= 0 or v == float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def kernel_launch_s(self) -> float:
        """Seconds per kernel launched from C++ (:attr:`launch_s`; None: :data:`LAUNCH_SHARE`
        of ``op_s``).

        >>> round(HostOverhead(op_s=9.8e-6).kernel_launch_s * 1e6, 6)
        3.0
        >>> HostOverhead(launch_s=2e-6).kernel_launch_s
        2e-06
        """
        return self.op_s * LAUNCH_SHARE if self.launch_s is None else self.launch_s

    @property
    def eager(self) -> bool:
        """Whether ops cost the host anything (``mode == "eager"``)."""
        return self.mode == "eager"

    def under(self, mode: str) -> HostOverhead:
        """The same server run in another mode (e.g. ``"cuda_graphs"``).

        Raises:
            ValueError: unknown mode.
        """
        return replace(self, mode=mode)

    def forward_s(self, ops: float, nograd_ops: float = 0.0) -> float:
        """Host seconds of a forward that issues ``ops`` ops, ``nograd_ops`` of them without
        autograd recording (checkpointed layers)."""
        if not self.eager:
            return 0.0
        nograd = self.op_s if self.nograd_op_s is None else self.nograd_op_s
        plain = min(nograd_ops, ops)
        return (ops - plain) * self.op_s + plain * nograd

    def backward_s(self, ops: float) -> float:
        """Host seconds of a backward that dispatches ``ops`` ops."""
        return ops * self.backward_op_s if self.eager else 0.0

    def serial_reads_s(self, small: int, large: int, ops: int) -> float:
        """Host-bound seconds of a loop that, tensor after tensor, issues ``ops`` ops without
        autograd recording and then reads one value back (``float(x.float().sum())``:
        DeepSpeed's serial overflow check), beyond the device time of those ops.

        Per tensor the host issues the ops (``ops * h``, ``h = nograd_op_s``), then the read
        (its op ``h`` and ``read_s``), which waits for the device to finish them: for a small
        tensor the device is done before the host is, ``(ops + 1) * h + read_s``; for a large
        one (``large``: a weight matrix) the device's time hides the issue of all but the
        first op, ``h + read_s`` beyond it (``max(ops * h, d) >= d`` taken as ``d``).
        Zero when the host is not modelled (``mode`` other than eager).

        Example:
            >>> h = HostOverhead(op_s=9.8e-6, nograd_op_s=8e-6, read_s=10e-6)
            >>> round(h.serial_reads_s(small=8, large=4, ops=2) * 1e6)  # 8*34 + 4*18
            344
        """
        if not self.eager:
            return 0.0
        h = self.op_s if self.nograd_op_s is None else self.nograd_op_s
        return small * ((ops + 1) * h + self.read_s) + large * (h + self.read_s)

    def blocking_s(self, ops: int, copies: int) -> float:
        """Host seconds of ``ops`` ops without autograd recording (``nograd_op_s`` each) and
        ``copies`` blocking host-device copies of a few bytes (``read_s`` each besides their
        op, counted in ``ops``) issued by a host that waits for each copy, so the device,
        idle before the first, stays idle throughout (a micro-batch's load,
        :class:`sim.engine.inputs.MicrobatchLoad`). Zero when the host is not modelled.

        Example:
            >>> h = HostOverhead(op_s=9.8e-6, nograd_op_s=8e-6, read_s=10e-6)
            >>> round(h.blocking_s(ops=40, copies=3) * 1e6)  # 40 * 8 + 3 * 10
            350
        """
        if not self.eager:
            return 0.0
        h = self.op_s if self.nograd_op_s is None else self.nograd_op_s
        return ops * h + copies * self.read_s

    def calls_s(
        self, modules: float, functions: float, backward: bool = False, te_modules: float = 0.0
    ) -> float:
        """Host seconds of the Python around the ops (:data:`sim.compute.megatron_ops.BLOCK_CALLS`):
        a forward's ``modules`` module calls, ``functions`` Function applies (the same with
        or without autograd recording: a Function's Python ``forward`` runs either way, an
        assumption for the node it skips) and ``te_modules`` Transformer Engine module
        forwards (``te_module_s`` each beyond a torch Linear), or, ``backward``, the
        ``functions`` Python backward nodes and the ``te_modules``' backwards (``te_module_s``
        each: TE#2053 measured the forward only; an assumption that the backward's Python adds
        as much, consistent with NVIDIA/TransformerEngine#445: on an H100, host-bound (1024 x
        1024, batch 1024), the issue's timed ``te.Linear`` step took 0.574 ms against
        torch's 0.176 ms, 3.3x, where TE#2053's forward alone is 2.7x; that script's loop is
        not quoted in full, so the step's contents are taken on the issue's word). Zero when the host is not modelled (every
        registered framework runs its layers as eager ``nn.Module`` calls; a ``cuda_graphs``
        mode replays them without Python).

        Example:
            >>> h = HostOverhead(module_s=2e-6, function_s=8e-6, function_backward_s=6e-6)
            >>> round(h.calls_s(11, 8) * 1e6), round(h.calls_s(11, 8, backward=True) * 1e6)
            (86, 48)
            >>> round(HostOverhead(te_module_s=22.8e-6).calls_s(0, 0, te_modules=4) * 1e6)
            91
        """
        if not self.eager:
            return 0.0
        te = te_modules * self.te_module_s
        if backward:
            return functions * self.function_backward_s + te
        return modules * self.module_s + functions * self.function_s + te

    def recompute_s(self, ops: float, regions: int) -> float:
        """Host seconds of re-running ``ops`` forward ops in ``regions`` checkpointed regions."""
        return self.forward_s(ops) + (regions * self.checkpoint_s if self.eager else 0.0)


NO_HOST = HostOverhead(source="not modelled: the host issues ops in no time")
"""The host model switched off: devices run as if every op were issued in advance."""
