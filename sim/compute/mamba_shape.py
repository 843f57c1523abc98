"""A Mamba-2 mixer's shape (:class:`MambaShape`; what each field is: :mod:`sim.compute.ssm`).

Split from :mod:`sim.compute.ssm` so that :mod:`sim.compute.mamba_cp` (context parallelism over
the mixer) can size a rank's mixer without importing the kernels that call it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MambaShape:
    """A Mamba-2 mixer (module doc).

    Attributes:
        heads: ``H`` (``mamba_num_heads``).
        head_dim: ``P`` (``mamba_head_dim``).
        state: ``N`` (``ssm_state_size``).
        groups: ``G`` (``n_groups``), dividing ``H``.
        conv_kernel: ``K`` (``conv_kernel``).
        chunk: ``Q`` (``chunk_size``).
    """

    heads: int
    head_dim: int
    state: int
    groups: int = 1
    conv_kernel: int = 4
    chunk: int = 256

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "state", "groups", "conv_kernel", "chunk"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"mamba.{name} must be a positive integer, got {v!r}")
        if self.heads % self.groups:
            raise ValueError(f"mamba.groups {self.groups} must divide mamba.heads {self.heads}")

    @property
    def inner(self) -> int:
        """``d_i = H * P``."""
        return self.heads * self.head_dim

    @property
    def conv_width(self) -> int:
        """Channels of the conv: ``d_i + 2 G N``."""
        return self.inner + 2 * self.groups * self.state

    @property
    def in_width(self) -> int:
        """Output width of ``in_proj``: ``2 d_i + 2 G N + H``."""
        return 2 * self.inner + 2 * self.groups * self.state + self.heads

    def params(self, h: int) -> int:
        """Parameters of the mixer and its pre-norm: ``in_proj``, the conv's weight and bias,
        ``dt_bias``, ``A_log`` and ``D`` (``H`` each), the gated norm's weight, ``out_proj``, the
        pre-norm's ``h`` (no projection biases: Nemotron-H ``mamba_proj_bias`` false)."""
        conv = self.conv_width * (self.conv_kernel + 1)
        return h * self.in_width + conv + 3 * self.heads + self.inner + self.inner * h + h
