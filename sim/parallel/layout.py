"""The parallel layout of one configuration: one record every layer asks.

A job's ``N`` GPUs split the work along named dimensions (torchtitan's ``ParallelDims``,
``torchtitan/distributed/parallel_dims.py``; Megatron-Core's ``parallel_state``):

========== ================================================================================
``pp``     pipeline ranks (``stages`` in an experiment: ``p``)
``vp``     stage chunks per pipeline rank (virtual stages, interleaved schedules: ``v``)
``dp_replicate``  data-parallel replica groups that all-reduce gradients (HSDP's replicate
           dimension; ``dp_width / dp_shard``)
``dp_shard``      data-parallel ranks that shard parameters, gradients and optimizer state
           (FSDP2's shard dimension, ``fully_shard`` over it: :mod:`sim.memory.fsdp`; 1 = not
           sharded by a dimension of its own)
``cp``     context-parallel ranks (the sequence split: ``s/cp`` tokens each)
``tp``     tensor-parallel ranks (Megatron's column/row split of every GEMM)
``sp``     sequence parallelism inside the tensor-parallel group (a flag)
``ep``     expert-parallel ranks (routed experts split across them)
``etp``    expert tensor parallelism (None: the experts are split like the dense layers, by
           ``tp``)
========== ================================================================================

``gpus = pp x dp_replicate x dp_shard x cp x tp``. The expert layers fold the same GPUs
differently (Megatron-Core's MoE parallel folding, ``megatron/core/parallel_state.py``,
``initialize_model_parallel(expert_tensor_parallel_size=...)``): ``etp x ep x edp = tp x cp x
dp`` per pipeline rank, with ``edp`` the expert-data-parallel ranks that reduce the experts'
gradients.

Rank order: Megatron-Core's default ``order="tp-cp-ep-dp-pp"`` (tensor ranks innermost, then
context, then data, pipeline outermost; the expert dimension folds inside ``cp x dp``), which
is also the order :mod:`sim.engine.groups` uses for its replicas (``dp * cp`` data- and
context-parallel ranks, context rank innermost, consecutive replicas forming an expert group).

Sharding rules (:meth:`ParallelLayout.shards`): how many ways each class of tensor is split on
a rank, so adding a dimension means adding its field here, its rule there, and its cost.

The flat names (``stages``, ``dp_width``, ``tensor_parallel``...) are the columns of
``results.csv`` and the keys of ``winner.yaml``; :data:`FLAT` maps them to the fields. One is not
a field: ``dp_width`` is every data-parallel rank, ``dp = dp_replicate x dp_shard`` (what a
user calls the data-parallel size, and what the samples per step and the GPU count multiply),
so ``dp_replicate = dp_width / dp_shard``: a layout with ``dp_shard = 1`` reads as before, and
torchtitan's ``data_parallel_shard_degree = -1`` (shard over every data-parallel rank) is
``dp_shard = dp_width`` (``torchtitan/config/configs.py``, ``ParallelismConfig``).

FSDP / HSDP groups (:meth:`ParallelLayout.shard_group`, :meth:`replicate_group`): torchtitan's
device mesh ``["pp", "dp_replicate", "dp_shard", "cp", "tp"]`` (``torchtitan/distributed/
parallel_dims.py::ParallelDims._build_mesh``) shards over ``dp_shard x cp`` (its
``dp_shard_cp`` mesh) and replicates over ``dp_replicate``: of the engine's ``dp x cp``
replicas (context rank innermost) a shard group is ``dp_shard x cp`` consecutive replicas and
a replicate group takes every ``dp_shard x cp``-th. The routed experts shard over the
replicas of a shard group that hold the same experts (torchtitan's ``efsdp`` mesh,
``torchtitan/distributed/fsdp.py::apply_fsdp_to_decoder``, ``shard_placement_fn``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

FLAT: dict[str, str] = {
    "stages": "pp",
    "virtual_stages": "vp",
    "dp_width": "dp",
    "dp_shard": "dp_shard",
    "tensor_parallel": "tp",
    "sequence_parallel": "sp",
    "expert_parallel": "ep",
    "expert_tensor_parallel": "etp",
    "context_parallel": "cp",
    "context_parallel_comm": "cp_comm",
}
"""Flat (experiment, row and replay) name -> :class:`ParallelLayout` field (``dp_width`` -> the
property ``dp``: module doc)."""

ORDER = ("tp", "cp", "dp", "pp")
"""Dense-layer rank order, innermost first (Megatron-Core ``order="tp-cp-ep-dp-pp"``; ``ep``
folds into ``cp x dp`` for the experts)."""

TENSOR_CLASSES = ("dense_params", "expert_params", "activations", "boundary", "model_states")
"""The tensor classes :meth:`ParallelLayout.shards` knows."""


@dataclass(frozen=True)
class ParallelLayout:
    """How one configuration splits its GPUs (see the module doc for each dimension).

    Attributes:
        pp, vp, dp_replicate, dp_shard, cp, tp, ep: sizes (>= 1).
        sp: Megatron sequence parallelism (meaningful with ``tp > 1``).
        etp: expert tensor-parallel size, or None for ``tp``.
        cp_comm: how context parallelism exchanges keys and values (``p2p``, ``all_gather``,
            ``a2a``: :mod:`sim.parallel.context`).
    """

    pp: int = 1
    vp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    sp: bool = False
    ep: int = 1
    etp: int | None = None
    cp_comm: str = "p2p"

    @classmethod
    def from_flat(cls, values: Mapping[str, Any] | object) -> ParallelLayout:
        """The layout of a mapping or object with the flat names of :data:`FLAT` (a
        ``PointConfig``, a ``ResultRow``, a results.csv record); absent names take defaults.

        >>> ParallelLayout.from_flat({"stages": 4, "dp_width": 2, "tensor_parallel": 8}).gpus
        64
        """
        get = values.get if isinstance(values, Mapping) else lambda k: getattr(values, k, None)
        kw: dict[str, Any] = {
            f: v for f, v in ((f, get(k)) for k, f in FLAT.items()) if not _absent(v)
        }
        dp = kw.pop("dp", None)
        if dp is not None:
            kw["dp_replicate"] = max(1, dp // kw.get("dp_shard", 1))
        return cls(**kw)

    def flat(self) -> dict[str, Any]:
        """The flat names and values (the inverse of :meth:`from_flat`).

        >>> ParallelLayout(dp_replicate=2, dp_shard=4).flat()["dp_width"]
        8
        """
        return {k: getattr(self, f) for k, f in FLAT.items()}

    @property
    def dp(self) -> int:
        """Data-parallel ranks ``dp_replicate x dp_shard``."""
        return self.dp_replicate * self.dp_shard

    @property
    def replicas(self) -> int:
        """Copies of each stage the engine runs: ``dp x cp`` data- and context-parallel ranks."""
        return self.dp * self.cp

    @property
    def gpus(self) -> int:
        """GPUs the configuration uses: ``pp x dp x cp x tp``."""
        return self.pp * self.dp * self.cp * self.tp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (``etp``, else ``tp``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel ranks per pipeline rank: ``tp x cp x dp / (etp x ep)``
        (Megatron-Core's MoE folding), at least 1."""
        return max(1, self.tp * self.cp * self.dp // (self.expert_tp * self.ep))

    @property
    def shard_size(self) -> int:
        """Replicas in one FSDP shard group: ``dp_shard x cp`` (module doc)."""
        return self.dp_shard * self.cp

    def shard_group(self, replica: int) -> tuple[int, ...]:
        """The engine replicas (``dp x cp``, context rank innermost) of ``replica``'s FSDP
        shard group: ``dp_shard x cp`` consecutive ones (module doc).

        >>> ParallelLayout(dp_replicate=2, dp_shard=2, cp=2).shard_group(5)
        (4, 5, 6, 7)
        """
        n = self.shard_size
        return tuple(range(replica // n * n, replica // n * n + n))

    def replicate_group(self, replica: int) -> tuple[int, ...]:
        """The replicas holding the same shard as ``replica`` (HSDP's replicate dimension):
        every ``dp_shard x cp``-th (module doc).

        >>> ParallelLayout(dp_replicate=2, dp_shard=2, cp=2).replicate_group(5)
        (1, 5)
        """
        n = self.shard_size
        return tuple(range(replica % n, self.replicas, n))

    @property
    def stages(self) -> int:
        """Pipeline stages ``pp x vp``."""
        return self.pp * self.vp

    def problems(self) -> list[str]:
        """What makes this layout impossible, whatever the model (empty when valid); each item
        names the flat field.

        >>> ParallelLayout(dp_replicate=2, ep=4).problems()[0][:62]
        'expert_parallel 4 must divide dp_width x context_parallel = 2 '
        """
        out = [
            f"{k} must be >= 1, got {getattr(self, f)}"
            for k, f in FLAT.items()
            if f not in ("sp", "cp_comm", "etp", "dp") and getattr(self, f) < 1
        ]
        out += [f"dp_width must be >= 1, got {self.dp}"] if self.dp_replicate < 1 else []
        if out:
            return out
        if self.etp is not None and self.etp < 1:
            return [f"expert_tensor_parallel must be >= 1, got {self.etp}"]
        if self.etp is None and self.replicas % self.ep:
            out.append(
                f"expert_parallel {self.ep} must divide dp_width x context_parallel = "
                f"{self.replicas} (the experts are spread over those ranks: raise dp_width or "
                "lower expert_parallel)"
            )
        elif self.etp is not None and (self.tp * self.replicas) % (self.etp * self.ep):
            out.append(
                f"expert_parallel x expert_tensor_parallel = {self.ep * self.etp} must divide "
                f"tensor_parallel x context_parallel x dp = {self.tp * self.replicas}"
            )
        return out

    def shards(self, tensor: str) -> int:
        """Into how many parts ``tensor`` is split on each rank (one of
        :data:`TENSOR_CLASSES`):

        * ``dense_params``: ``tp`` (Megatron's column/row split of each GEMM's weight: what a
          rank's layers hold; Shoeybi et al. 2019, §3);
        * ``expert_params``: ``ep x etp`` (experts over EP, each expert's GEMMs over ETP);
        * ``activations``: ``cp`` (``s/cp`` tokens), ``x tp`` more with ``sp`` for the
          sequence-parallel regions (Korthikanti et al. 2022, §4.2.2);
        * ``boundary``: ``tp x cp`` (each tensor rank sends its share of a stage's output);
        * ``model_states``: ``dp_shard x cp`` more on top of the split of their parameters
          with FSDP (``dp_shard > 1``: torchtitan's ``dp_shard_cp`` mesh shards parameters,
          gradients and optimizer state; :mod:`sim.memory.fsdp`), else 1 (memory policies that
          shard over the data-parallel replicas instead, ZeRO, say so themselves). A framework
          that runs FSDP at ``dp_shard = 1`` (torchtitan with ``cp > 1``:
          :meth:`~sim.framework.base.Framework.runs_fsdp`) shards over :attr:`shard_size`.

        Raises:
            KeyError: an unknown tensor class.
        """
        rules = {
            "dense_params": self.tp,
            "expert_params": self.ep * self.expert_tp,
            "activations": self.cp * (self.tp if self.sp else 1),
            "boundary": self.tp * self.cp,
            "model_states": self.shard_size if self.dp_shard > 1 else 1,
        }
        return rules[tensor]

    def coords(self, rank: int) -> dict[str, int]:
        """The coordinate of global ``rank`` along each dimension of :data:`ORDER`.

        Raises:
            ValueError: ``rank`` outside ``0 .. gpus - 1``.

        >>> ParallelLayout(pp=2, dp_replicate=2, tp=2).coords(5)
        {'tp': 1, 'cp': 0, 'dp': 0, 'pp': 1}
        """
        if not 0 <= rank < self.gpus:
            raise ValueError(f"rank {rank} is outside 0..{self.gpus - 1}")
        out = {}
        for dim in ORDER:
            size = self._size(dim)
            out[dim] = rank % size
            rank //= size
        return out

    def group(self, dim: str, rank: int) -> tuple[int, ...]:
        """The global ranks of ``rank``'s group along ``dim`` (one of :data:`ORDER`), in
        order.

        >>> ParallelLayout(pp=2, dp_replicate=2, tp=2).group("dp", 1)
        (1, 3)
        """
        c = self.coords(rank)
        stride = math.prod(self._size(d) for d in ORDER[: ORDER.index(dim)])
        base = rank - c[dim] * stride
        return tuple(base + i * stride for i in range(self._size(dim)))

    def _size(self, dim: str) -> int:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}[dim]

    def describe(self) -> str:
        """A short label: ``p=4 v=2 w=2 t=8+sp cp=2 (p2p) ep=4``; sizes of 1 left out."""
        parts = [f"p={self.pp}"]
        parts += [f"v={self.vp}"] if self.vp > 1 else []
        parts += [f"w={self.dp_replicate}"]
        parts += [f"shard={self.dp_shard}"] if self.dp_shard > 1 else []
        parts += [f"t={self.tp}{'+sp' if self.sp else ''}"] if self.tp > 1 else []
        parts += [f"cp={self.cp} ({self.cp_comm})"] if self.cp > 1 else []
        parts += [f"ep={self.ep}"] if self.ep > 1 else []
        parts += [f"etp={self.etp}"] if self.etp is not None else []
        return " ".join(parts)


def _absent(value: Any) -> bool:
    """None, or a missing number read from a table (NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


LAYOUT_FIELDS = tuple(f.name for f in fields(ParallelLayout))
