"""Stalls of Transformer Engine's default activation-offload schedule (``--cpu-offloading``).

Megatron-Core wraps each transformer layer's forward in TE's CPU-offload context
(``TransformerBlock.__init__`` -> ``get_cpu_offload_context(cpu_offloading,
cpu_offloading_num_layers, config.num_layers, ...)``, ``megatron/core/transformer/
transformer_block.py`` 304-320, ``megatron/core/extensions/transformer_engine.py`` 3442-3480,
NVIDIA/Megatron-LM@d98e8a64dd). From TE 2.10 the context is TE's ``DefaultOffloadSynchronizer``
(``transformer_engine/pytorch/cpu_offload.py`` 576-653, NVIDIA/TransformerEngine@d0067d0; the
refactor #1762, c52576053, first tagged v2.10), which for ``n`` offloaded layers of ``L``:

* before layer ``j``'s forward (``fwd_step``) queues the device-to-host copies of layer
  ``j - 1``'s saved tensors on one offload stream (``start_offload``: the stream waits for each
  tensor's "saved" event, then ``copy_(non_blocking=True)`` into pinned host memory), for
  ``j - 1 < n``;
* before layer ``j = L - n + k`` makes the compute stream wait for layer ``k``'s copies to end
  (``release_activation_forward_gpu_memory``: ``current_stream().wait_event``), so at most
  ``L - n`` layers' activations are on the GPU;
* before layer ``j = L - 1 - n + k``'s backward (``bwd_step``) queues layer ``k``'s
  host-to-device copies on the same stream after everything the compute stream has issued
  (``start_reload``: ``offload_stream.wait_stream(current_stream())``);
* layer ``k``'s backward waits for its tensors' reload events (``pop_tensor``).

:func:`offload_stalls_s` runs that two-stream schedule over one micro-batch's layers and
returns the compute stream's waits. Approximations: a layer's copies start when its forward
ends (TE may start a tensor's copy as soon as it is saved, earlier); each copy takes the
route's time (:func:`sim.memory.estimate.copy_s`: latency plus bytes over the bottleneck
bandwidth of the preset's GPU-host link, e.g. NVLink-C2C on ``gb200-nvl72``); the copies'
HBM traffic does not slow the compute (TE's CPU-offloading guide says memory-bound kernels may
notice it; no figure is given). TE <= 2.9 (``cpu_offload_v1.py``, double-buffered group
offload with the offloads spread evenly over the forward) is not modelled separately.
"""

from __future__ import annotations

from collections.abc import Sequence


def forward_stall_s(fwd_s: Sequence[float], out_s: Sequence[float], n: int) -> float:
    """Seconds the compute stream waits in one micro-batch's forward for offloads.

    Args:
        fwd_s: each layer's forward seconds, in order (``L`` layers).
        out_s: device-to-host copy seconds of layers ``0 .. n-1``.
        n: offloaded layers, ``0 <= n <= L - 1`` (TE refuses ``n >= L``).
    """
    layers = len(fwd_s)
    c = o = 0.0
    done: list[float] = []
    for j in range(layers):
        if 0 < j <= n:  # fwd_step(j) starts layer j-1's offload
            o = max(o, c) + out_s[j - 1]
            done.append(o)
        k = j - (layers - n)
        if 0 <= k < n:  # release_activation_forward_gpu_memory(k)
            c = max(c, done[k])
        c += fwd_s[j]
    return c - sum(fwd_s)


def backward_stall_s(bwd_s: Sequence[float], in_s: Sequence[float], n: int) -> float:
    """Seconds the compute stream waits in one micro-batch's backward for reloads.

    Args:
        bwd_s: each layer's backward seconds, in layer order (run from the last).
        in_s: host-to-device copy seconds of layers ``0 .. n-1``.
        n: offloaded layers, ``0 <= n <= L - 1``.
    """
    layers = len(bwd_s)
    c = o = 0.0
    ready: dict[int, float] = {}
    for j in range(layers - 1, -1, -1):
        k = j - (layers - 1 - n)
        if 0 <= k < n:  # bwd_step(j) starts layer k's reload after the issued compute
            o = max(o, c) + in_s[k]
            ready[k] = o
        if j < n:  # pop_tensor waits for the reload
            c = max(c, ready[j])
        c += bwd_s[j]
    return c - sum(bwd_s)


def offload_stalls_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    out_s: Sequence[float],
    in_s: Sequence[float],
    n: int,
) -> tuple[float, float]:
    """``(forward, backward)`` stall seconds of one micro-batch under TE's default schedule
    (:func:`forward_stall_s`, :func:`backward_stall_s`).

    Raises:
        ValueError: ``n`` outside ``0 .. L - 1`` or fewer copy times than ``n``.
    """
    if not 0 <= n <= len(fwd_s) - 1 and n:
        raise ValueError(f"offloaded layers {n} must be in 0 .. {len(fwd_s) - 1}")
    if len(out_s) < n or len(in_s) < n:
        raise ValueError(f"need copy times for {n} offloaded layers")
    return forward_stall_s(fwd_s, out_s, n), backward_stall_s(bwd_s, in_s, n)
