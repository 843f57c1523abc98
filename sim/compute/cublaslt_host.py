"""Host work of one cuBLASLt GEMM as Transformer Engine issues it, beyond the kernel launch.

Transformer Engine's ``cublas_gemm`` builds everything cuBLASLt needs on **every** call and
keeps nothing keyed on the shape (NVIDIA/TransformerEngine@5671fd3 = v2.12, the 26.02
containers' TE, ``transformer_engine/common/gemm/cublaslt_gemm.cu`` 454-796; the same at v2.14,
26.04's, 451-797): four ``cublasLtMatrixLayoutCreate``, a ``cublasLtMatmulDescCreate`` and its
``SetAttribute`` calls (transposes, scale pointers and modes, fast accumulation, epilogue), a
``cublasLtMatmulPreferenceCreate`` with its attributes, one ``cublasLtMatmulAlgoGetHeuristic``
query, the ``cublasLtMatmul`` launch, and six ``...Destroy`` calls. cuBLASLt itself caches the
heuristic's answer (pytorch/pytorch#191700, 2026-07-31: "cuBLASLt has an internal heuristic
cache"; a cache above it saves a further 0.7-0.9 us per call, "the bulk of the time is the
heuristic call itself").

**Price**: NVIDIA/raft#1736 memoised the heuristic's answer and the descriptors of RAFT's
cuBLASLt matmul wrapper and measured the host time from entering the wrapper to the kernel's
launch (NVTX): "approx 10us -> 5us". So a GEMM called as TE calls it costs the host about
:data:`TE_GEMM_CALL_S` = 10 us, where pipesim's per-expert count
(:mod:`sim.compute.te_grouped_host`) charged a bare kernel launch (3 us on the reference host,
meta-pytorch/tritonbench#1017): :data:`SETUP_S` = 7 us more per GEMM. Assumptions: RAFT's CPU
(not stated) runs it as the reference x86 host (``dgx-h100``) does; on another host the set-up
scales as that host's C++ work below Python does: its eager op less its kernel launch, over
the reference's (:attr:`~sim.hardware.host_ops.HostOverhead.op_s` less
:attr:`~sim.hardware.host_ops.HostOverhead.kernel_launch_s`, 9.8 - 3.0 = 6.8 us). It is C++
library work (descriptor objects, attribute calls, the heuristic query), the kind whose
Grace/x86 ratio the Grace presets take from a whole ``torch.nn.Linear`` forward less its Python
and its launch (NVIDIA/TransformerEngine#2053, whose ``addmm`` builds cuBLASLt descriptors too:
3.75, ``sim/hardware/presets/gb200-nvl72.yaml``), not a driver launch, which GB200 measures at
the reference's 3 us (meta-pytorch/tritonbench#1017). On a host whose preset gives no launch
of its own (every x86 preset) this is the eager op's ratio, ``op_s / 9.8 us``. Until
2026-11-30 it scaled by ``op_s / 9.8 us`` on every host (Grace: 29.7 / 9.8 = 3.03, 21.2 us;
now 3.75, 26.3 us), and before that as the host's kernel launch, the same on every host whose
preset gives no launch of its own. Where it applies: the per-expert GEMMs of ``GroupedLinear``
(:func:`sim.compute.te_grouped_host.per_expert_s`); a TE Linear's own GEMM is inside the
Linear's measured host time (:attr:`~sim.hardware.host_ops.HostOverhead.te_module_s`,
NVIDIA/TransformerEngine#2053 timed the whole module's forward).

Not counted: ``nvte_multi_stream_cublas_gemm``'s event records and stream waits (one record on
the main stream, a wait per compute stream before, a record and a wait per compute stream after:
``cublaslt_gemm.cu`` 967-1020 at v2.12; per grouped GEMM, not per expert; no published figure).
"""

from __future__ import annotations

from sim.hardware.host_ops import HostOverhead

TE_GEMM_CALL_S = 10.0e-6
"""Host seconds of one un-memoised cuBLASLt GEMM call, wrapper to launch (NVIDIA/raft#1736)."""
REF_LAUNCH_S = 3.0e-6
"""A kernel launch from C++ (meta-pytorch/tritonbench#1017, measured on GB200; the reference
host's by assumption)."""
SETUP_S = TE_GEMM_CALL_S - REF_LAUNCH_S
"""What a TE GEMM call costs the reference host beyond its launch: 7 us (module doc)."""
REF_OP_S = 9.8e-6
"""The reference host's eager op (``dgx-h100`` ``op``); less :data:`REF_LAUNCH_S`, what
:func:`gemm_setup_s` scales by."""


def gemm_setup_s(host: HostOverhead | None = None) -> float:
    """Seconds one Transformer Engine cuBLASLt GEMM costs ``host`` beyond a kernel launch:
    :data:`SETUP_S` scaled by the host's C++ work per eager op (its ``op_s`` less its
    :attr:`~sim.hardware.host_ops.HostOverhead.kernel_launch_s`) over the reference's
    (9.8 - 3.0 us; None: the reference host). Module doc: the descriptors and the heuristic
    query TE builds per call, C++ work whose host ratio is the dispatcher's, not the driver
    launch's.

    >>> round(gemm_setup_s() * 1e6, 2)
    7.0
    >>> round(gemm_setup_s(HostOverhead(op_s=28.5e-6, launch_s=3.0e-6)) * 1e6, 2)
    26.25
    """
    if host is None:
        return SETUP_S
    return SETUP_S * (host.op_s - host.kernel_launch_s) / (REF_OP_S - REF_LAUNCH_S)


__all__ = ["REF_LAUNCH_S", "REF_OP_S", "SETUP_S", "TE_GEMM_CALL_S", "gemm_setup_s"]
