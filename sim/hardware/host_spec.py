"""The ``hosts:`` and ``host_overhead:`` keys of a hardware description: the CPU sockets with
their DRAM and CPU Adam rate, and what issuing one op costs a training process's CPU thread."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.hardware.host_ops import HostOverhead
from sim.hardware.spec_fields import NODE_NAME, Bytes, Seconds


class HostSpec(BaseModel):
    """One CPU socket (NUMA node) and the DRAM attached to it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NODE_NAME, description="Node name, e.g. 'cpu0'.")
    dram: Bytes = Field(ge=0, description="DRAM installed on this socket, e.g. '256 GiB'.")
    usable_dram: Bytes | None = Field(
        default=None,
        ge=0,
        description="DRAM the OS gives processes (MemTotal); default: `dram` less the kernel's "
        "page map, 1/64 of it (sim.hardware.host_memory.os_usable_bytes).",
    )
    adam_params_per_s: float = Field(
        default=1.84e9,
        gt=0,
        description="CPU Adam throughput of this socket in parameters/s (offloaded optimizer "
        "steps). Default 1.84e9: half of the 3.675e9 params/s DeepSpeed's CPU-Adam reaches on a "
        "DGX-2 host (2x Xeon Platinum 8168, DDR4-2666; ZeRO-Offload, Ren et al. ATC'21, Tables 2 "
        "and 4, least squares over its 1-10B rows: sim.memory.host_adam.REN_TABLE4); presets "
        "scale it per CPU by peak DRAM bandwidth (sim.memory.host_adam.dram_scaled_rate).",
    )


class HostOverheadSpec(BaseModel):
    """What issuing one op costs a training process's CPU thread (:mod:`sim.hardware.host_ops`):
    the host side of eager PyTorch. Every GPU's process pays it; the device runs an op only
    once it has been issued."""

    model_config = ConfigDict(extra="forbid")

    op: Seconds = Field(
        ge=0,
        description="Host time per op of a forward (Python, dispatcher, autograd recording, "
        "kernel launch), per op as traces count them (fwd_ops), e.g. '10 us'.",
    )
    backward_op: Seconds = Field(
        ge=0, description="Host time per op the autograd engine dispatches in a backward."
    )
    nograd_op: Seconds | None = Field(
        default=None,
        ge=0,
        description="Host time per op of a forward without autograd recording (the first "
        "forward of a checkpointed layer); default: `op`.",
    )
    checkpoint: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time of the activation-checkpoint wrapper per checkpointed region "
        "and micro-batch, besides the ops it re-runs.",
    )
    read: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time of a blocking read of a device scalar (.item()) besides its "
        "op: the device-to-host copy of a few bytes and the wait for it, e.g. '10 us'.",
    )
    module: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per nn.Module call besides its ops (e.g. '2 us'); sim calibrate "
        "measures it.",
    )
    function: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per torch.autograd.Function apply besides its ops.",
    )
    function_backward: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per Python backward node (a Function's backward) the autograd "
        "engine calls, besides its ops.",
    )
    te_module: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time a Transformer Engine module's forward adds over a torch.nn.Linear "
        "forward (NVIDIA/TransformerEngine#2053), charged per TE module of a layer run with "
        "--transformer-impl transformer_engine.",
    )
    launch: Seconds | None = Field(
        default=None,
        ge=0,
        description="Host time per kernel launched from C++ without a Python-level op around it "
        "(cuLaunchKernel, a cuBLASLt GEMM in an extension's per-expert loop); default: 3.0/9.8 "
        "of `op` (dgx-h100's split).",
    )
    mode: Literal["eager", "cuda_graphs"] = Field(
        default="eager",
        description="'eager' (every op costs the host) or 'cuda_graphs' (captured regions are "
        "replayed by one launch: per-op host cost 0).",
    )
    cpu: str = Field(default="", description="The host CPU these numbers belong to.")
    source: str = Field(default="", description="Measurement or citation, with assumptions.")

    def overhead(self) -> HostOverhead:
        """The :class:`~sim.hardware.host_ops.HostOverhead` this describes."""
        return HostOverhead(
            self.op,
            self.backward_op,
            self.checkpoint,
            self.nograd_op,
            self.mode,
            self.cpu,
            self.source,
            self.read,
            module_s=self.module,
            function_s=self.function,
            function_backward_s=self.function_backward,
            te_module_s=self.te_module,
            launch_s=self.launch,
        )
