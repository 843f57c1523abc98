"""Context parallelism over a Mamba-2 layer, as Megatron-Core runs it ("all-to-all" CP).

Megatron-Core's ``MambaContextParallel`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/ssm/mamba_context_parallel.py``; called by ``MambaMixer.forward`` and
``_ssm_training``, ``megatron/core/ssm/mamba_mixer.py`` 510-525 and 679-733) keeps the
projections sequence-sharded and runs the causal conv1d and the SSD scan over the **whole
sequence for ``1/cp`` of the rank's heads**: ``in_proj`` over the rank's ``t = b*s/cp`` tokens,
then ``pre_conv_ssm`` (lines 139-194), ``mamba_split_conv1d_scan_combined`` over ``b*s`` tokens
with ``H/(tp*cp)`` heads, then ``post_conv_ssm`` (196-206), the gated ``RMSNorm`` and
``out_proj`` over ``t`` tokens again (the norm runs after the exchange: ``y = self.norm(y)``
follows ``post_conv_ssm``, mamba_mixer.py 727-731). With ``G_t = G/tp`` groups and ``H_t = H/tp``
heads on the tensor rank:

* **constraints** (``__init__``, lines 104-135): ``H_t`` divisible by ``cp`` ("nheads must be
  evenly divisible by tp_size * cp_size"); if ``G_t < cp``, ``cp`` divisible by ``G_t`` ("cp_size
  must be evenly divisible by ngroups/tp_size"): each group's ``B``/``C`` is repeated
  ``r = cp/G_t`` times so that each CP rank holds one group (``ngroups_local_tpcp = 1``); else
  ``G_t`` divisible by ``cp`` ("ngroups must be evenly divisible by tp_size * cp_size"), ``r = 1``;
* **forward before the scan** (``pre_conv_ssm``): ``in_proj``'s output is split (views) into
  ``z, x`` (``d_i/tp`` wide), ``B, C`` (``G_t*N``) and ``dt`` (``H_t``); ``B`` and ``C`` are
  ``einops.repeat``-ed to ``G_t*r*N`` (a copy when ``r > 1``; ``r = 1`` is a view); each of the
  five goes through ``all_to_all_sp2hp`` (``tensor_parallel/mappings.py`` 566-592: ``torch.cat``
  of its ``cp`` column slices, a copy, then one ``all_to_all_single``); the five results are
  ``torch.cat``-ed (a copy) and put back in sequence order from the causal load-balanced split
  (``_undo_attention_load_balancing``: ``torch.chunk`` + ``torch.cat`` of ``2*cp`` chunks, a
  copy);
* **forward after the scan** (``post_conv_ssm``): ``_redo_attention_load_balancing`` (a copy of
  ``y``), ``all_to_all_hp2sp`` (mappings.py 595-621: one all-to-all, then ``torch.cat`` of its
  row slices, a copy);
* **backward** (autograd's mirror): ``y``'s gradient: the ``cat``'s backward gives views, the
  ``split``'s backward cats them (a copy), one all-to-all (``_AllToAll.backward``, mappings.py
  469-485), the ``chunk``'s backward cats (a copy); then the scan's gradient of the whole-sequence
  ``zxBCdt``: the load-balance ``chunk``'s backward (a copy), the big ``cat``'s backward (views,
  not contiguous: ``_AllToAll.forward`` makes each ``contiguous()``, a copy), five all-to-alls,
  each ``split``'s backward cat (a copy), with ``r > 1`` the repeat's backward (a sum over the
  ``r`` copies), and the first ``torch.split``'s backward (a cat of the five gradients into
  ``zxBCdt``'s, a copy);
* **exchanged bytes**: every all-to-all moves a ``t x width`` tensor in the layer's dtype
  (``d`` bytes: bf16 in training), each rank sending ``(cp-1)/cp`` of it; widths ``d_i/tp``,
  ``d_i/tp``, ``G_t*r*N``, ``G_t*r*N``, ``H_t`` before the scan and ``d_i/tp`` (``y``) after it.

The SSD scan's cost is linear in the tokens at fixed heads (Dao & Gu arXiv:2405.21060 §6: the
chunked algorithm's work is ``O(T*Q*P + T*P*N)`` per head; :func:`sim.compute.ssm.ssd_fwd_flops`
``T*H*(4 P N + Q P) + 2*T*G*Q*N``), so ``b*s`` tokens of ``H/(tp*cp)`` heads cost ``1/cp`` of the
``cp = 1`` scan, but for ``r > 1``, where each rank computes its group's ``C B^T`` whole.
Megatron's all-to-alls are synchronous on the compute stream (``all_to_all_single`` without
``async_op``): nothing overlaps them (:mod:`sim.parallel.decoder_comm`).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.compute.mamba_shape import MambaShape

PRE_NAMES = ("z", "x", "B", "C", "dt")
"""The five tensors exchanged before the scan, in ``pre_conv_ssm``'s order."""


def cp_problem(m: MambaShape, tp: int, cp: int) -> str:
    """Why Megatron-Core refuses ``cp`` context-parallel ranks over ``m`` split over ``tp``
    tensor ranks (``MambaContextParallel.__init__``, module doc), or ``""``."""
    if cp == 1:
        return ""
    h, g = m.heads // tp, m.groups // tp
    if cp < 1 or h % cp:
        return (f"context_parallel {cp}: Megatron-Core needs the Mamba heads (mamba.heads "
                f"{m.heads}) divisible by tensor_parallel x context_parallel = {tp * cp}")  # fmt: skip
    if g < cp and cp % g:
        return (f"context_parallel {cp}: Megatron-Core needs it divisible by mamba.groups / "
                f"tensor_parallel = {g} when smaller")  # fmt: skip
    if g >= cp and g % cp:
        return (f"context_parallel {cp}: Megatron-Core needs the Mamba groups (mamba.groups "
                f"{m.groups}) divisible by tensor_parallel x context_parallel = {tp * cp}")  # fmt: skip
    return ""


def repeat_count(m: MambaShape, tp: int, cp: int) -> int:
    """``r``: how many CP ranks share a group's ``B``/``C`` (``group_repeat_count``)."""
    g = m.groups // tp
    return cp // g if g < cp else 1


def rank_mixer(m: MambaShape, tp: int, cp: int) -> MambaShape:
    """The conv and scan one rank runs: ``H/(tp*cp)`` heads and ``ngroups_local_tpcp`` groups
    (``G/(tp*cp)``, or 1 when groups are repeated), over the whole sequence (module doc).

    Raises:
        ValueError: :func:`cp_problem`, or ``tp`` not dividing the heads and groups.
    """
    why = cp_problem(m, tp, cp)
    if why or m.heads % tp or m.groups % tp:
        raise ValueError(why or f"tensor_parallel {tp} must divide the Mamba heads and groups")
    g = m.groups // tp
    return MambaShape(m.heads // (tp * cp), m.head_dim, m.state, max(g // cp, 1), m.conv_kernel,
                      m.chunk)  # fmt: skip


def pre_widths(m: MambaShape, tp: int, cp: int) -> tuple[int, int, int, int, int]:
    """Per-token widths (elements) of ``z, x, B, C, dt`` as each enters its all-to-all on one
    rank: ``d_i/tp, d_i/tp, G_t*r*N, G_t*r*N, H_t`` (module doc)."""
    di, bc = m.inner // tp, m.groups // tp * repeat_count(m, tp, cp) * m.state
    return di, di, bc, bc, m.heads // tp


def alltoall_bytes(m: MambaShape, t: int, tp: int, cp: int, d: int) -> tuple[list, list]:
    """``(forward, backward)``: ``(tensor, bytes each rank sends)`` of each all-to-all of a
    Mamba layer on one of ``cp`` ranks holding ``t = b*s/cp`` tokens, ``d`` bytes per element,
    in the order Megatron issues them (forward ``z, x, B, C, dt, y``; backward ``y`` first,
    then the five in autograd's reverse order); ``[]`` for ``cp == 1``."""
    if cp == 1:
        return [], []
    share = (cp - 1) / cp
    pre = [(n, float(t * w * d) * share) for n, w in zip(PRE_NAMES, pre_widths(m, tp, cp),
                                                           strict=True)]  # fmt: skip
    post = ("y", float(t * (m.inner // tp) * d) * share)
    return pre + [post], [post] + pre[::-1]


def copies_fwd(
    m: MambaShape, t: int, tp: int, cp: int, d: int
) -> tuple[list[Kernel], list[Kernel]]:
    """``(before the scan, after it)``: the copies ``MambaContextParallel`` adds to the
    forward on a rank holding ``t`` tokens (module doc; each reads and writes its bytes)."""
    if cp == 1:
        return [], []
    w, r = pre_widths(m, tp, cp), repeat_count(m, tp, cp)
    before = [mem(f"mamba_cp_repeat_{n}", t * w[i] * d * (1 + 1 / r)) for i, n in
              ((2, "B"), (3, "C")) if r > 1]  # fmt: skip
    before += [mem(f"mamba_cp_split_{n}", 2 * t * x * d) for n, x in zip(PRE_NAMES, w, strict=True)]
    before += [mem("mamba_cp_cat", 2 * t * sum(w) * d), mem("mamba_cp_undo_lb", 2 * t * sum(w) * d)]
    y = 2 * t * (m.inner // tp) * d
    return before, [mem("mamba_cp_redo_lb", y), mem("mamba_cp_hp2sp_cat", y)]


def copies_bwd(
    m: MambaShape, t: int, tp: int, cp: int, d: int
) -> tuple[list[Kernel], list[Kernel]]:
    """``(after the scan's backward, before it)``: the copies of the backward of
    ``MambaContextParallel`` (module doc): ``y``'s gradient before the scan's backward, the
    ``zxBCdt`` gradient's after it."""
    if cp == 1:
        return [], []
    w, r = pre_widths(m, tp, cp), repeat_count(m, tp, cp)
    y = 2 * t * (m.inner // tp) * d
    before = [mem("mamba_cp_hp2sp_cat_bwd", y), mem("mamba_cp_redo_lb_bwd", y)]
    after = [mem("mamba_cp_undo_lb_bwd", 2 * t * sum(w) * d)]
    after += [mem(f"mamba_cp_contiguous_{n}", 2 * t * x * d) for n, x in zip(PRE_NAMES, w,
                                                                            strict=True)]  # fmt: skip
    after += [mem(f"mamba_cp_split_{n}_bwd", 2 * t * x * d) for n, x in zip(PRE_NAMES, w,
                                                                           strict=True)]  # fmt: skip
    after += [mem(f"mamba_cp_repeat_{n}_bwd", t * w[i] * d * (1 + 1 / r)) for i, n in
              ((2, "B"), (3, "C")) if r > 1]  # fmt: skip
    return before, after + [mem("mamba_cp_split_bwd", 2 * t * (m.in_width // tp) * d)]


HOST_FWD = (
    ("pre_conv_ssm: torch.split of zxBCdt", 1),
    ("five all_to_all_sp2hp: reshape, split, cat, empty_like, all_to_all_single, reshape", 30),
    ("einops.repeat of B and C: reshape, unsqueeze, expand, reshape", 8),
    ("torch.cat of the five, _undo_attention_load_balancing: chunk, cat", 3),
    (
        "post_conv_ssm: chunk, cat; all_to_all_hp2sp: reshape, empty_like, all_to_all_single, "
        "reshape, split, cat; reshape",
        9,
    ),  # fmt: skip
    ("sliced conv weight and bias (split, 3 slices, cat each), dt_bias, A_log, D slices", 13),
)
"""Forward ops (ATen, as :mod:`sim.compute.megatron_ops` counts them) ``MambaContextParallel``
adds to a Mamba layer with ``cp > 1`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/ssm/mamba_context_parallel.py`` 139-206, 235-308, 311-361;
``tensor_parallel/mappings.py`` 424-467, 566-621); the ``cp == 1`` path returns its inputs."""

HOST_BWD = (
    (
        "y: view, cat backward (cp narrows), split backward (cat), view, all-to-all (empty_like, "
        "all_to_all_single), view, chunk's cat backward (2 cp narrows), cat",
        (7, 3),
    ),  # fmt: skip
    (
        "zxBCdt: load-balance cat backward (2 cp narrows) and chunk backward (cat); five slices of "
        "the big cat's backward",
        (6, 2),
    ),  # fmt: skip
    (
        "five all-to-alls: view, contiguous (clone), empty_like, all_to_all_single, split's cat "
        "backward (cp narrows, cat), view",
        (30, 5),
    ),  # fmt: skip
    ("repeat backward of B and C (view, sum, squeeze, view); torch.split backward (cat)", (9, 0)),
    ("sliced parameters: slice_backward of 9 slices, 2 split and 6 narrow backward ops", (17, 0)),
)
"""Backward ops of :data:`HOST_FWD`'s autograd nodes, ``(fixed, per CP rank)`` each (a ``cat``
of ``n`` inputs backward: ``n`` narrows; a ``split`` backward: one ``cat``; a view: one view;
the all-to-all ``Function``'s backward: another all-to-all). Approximate to a few ops, as
:mod:`sim.compute.megatron_ops`'s counts are."""


def host_ops(cp: int) -> tuple[float, float]:
    """``(forward, backward)`` host ops :data:`HOST_FWD` and :data:`HOST_BWD` add to a Mamba
    layer on one of ``cp`` ranks; ``(0, 0)`` for ``cp == 1``.

    Example: ``64`` forward and ``69 + 10 cp`` backward ops.
        >>> host_ops(1), host_ops(4)
        ((0.0, 0.0), (64.0, 109.0))
    """
    if cp == 1:
        return 0.0, 0.0
    fwd = sum(n for _, n in HOST_FWD)
    return float(fwd), float(sum(a + b * cp for _, (a, b) in HOST_BWD))
