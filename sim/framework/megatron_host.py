"""Megatron-LM's host work around the model, counted from its training loop, and the options of
its command line that add to it.

Counted at NVIDIA/Megatron-LM@d98e8a64 (``MLM:``) as ops dispatched to PyTorch (each priced at
the host's per-op seconds without autograd recording: the step runs under ``torch.no_grad()``),
blocking reads of a scalar (``.item()``; a ``torch.tensor([x], device='cuda')`` from a Python
value, a pageable host-to-device copy, counts as one too) and reductions of a scalar over the
ranks that a read waits for (:class:`~sim.engine.step_host.StepHost`, priced by
:func:`~sim.engine.step_host.step_host_s`). Plain Python (attribute checks, list building) is
not counted: it is sub-microsecond per statement beside an op's several microseconds (an
assumption that undercounts the per-tensor loops a little). bf16 and fp32 runs have no loss
scaler; fp16 adds the found-inf check (:data:`FP16_CHECK`).

Per iteration (``megatron/training/training.py::train_step`` and ``train``), where ``S`` is the
parameter tensors the rank's optimizer steps and ``T`` those of its model chunks:

* ``optimizer.step()`` (``MLM:megatron/core/optimizer/optimizer.py::MixedPrecisionOptimizer``):
  the gradients copied to the fp32 masters (``Float16OptimizerWithFloat16Params.
  _copy_model_grads_to_main_grads``: ``main_grad.float()``, 1 op per tensor;
  ``distrib_optimizer.py::_copy_model_grads_to_main_grads``: ``view(-1)``, the shard's slice,
  ``.float()``: 3 per tensor of the shard); the gradient norm and clip
  (``clip_grads.py::get_grad_norm_fp32``: two ``torch.zeros``, ``multi_tensor_l2norm``,
  ``** 2``, the all-reduce over the grad-stats group, ``pow``; ``clip_grad_by_total_norm_fp32``:
  ``.detach()`` per tensor, ``torch.zeros``, the coefficient's add, divide and ``clamp_max_``,
  ``multi_tensor_scale_tensor``); FusedAdam's ``multi_tensor_applier`` for each of Megatron's
  two parameter groups (with and without weight decay, 2 ops each, an assumption for its
  bookkeeping); the masters copied back (``_multi_tensor_copy_this_to_that``: 1 op;
  the distributed optimizer's ``copy_group_params``: ``view(-1)``, slice, ``copy_``: 3 per
  tensor of the shard) and its all-gather launched (1 op per bucket, one bucket here);
* ``train_step``'s tail: ``logical_and_across_model_parallel_group`` (``torch.tensor`` from a
  bool, the all-reduce, ``.item()``) and ``reduce_max_stat_across_model_parallel_group`` of
  the gradient norm (``torch.tensor``, the all-reduce, two ``.item()``); the loss averaged over
  the data-parallel ranks (``vstack``, ``sum``, the all-reduce, two selects and a divide;
  a ``view`` per micro-batch is not counted);
* ``train``'s logging block: ``optimizer.get_loss_scale().item()``.

Options (:data:`HOST_OPTIONS`), each adding what its flag makes the loop do:
``log_num_zeros_in_grad`` (``clip_grads.py::count_zeros_fp32``: ``torch.zeros``, then per
tensor ``.detach()``, ``count_nonzero``, ``numel -``, ``+``; the all-reduce and ``.item()``;
then ``reduce_max_stat_across_model_parallel_group`` in ``train_step``); ``log_params_norm``
(``MLM:megatron/training/utils/common_utils.py::calc_params_l2_norm``: no copy per tensor, as
``_get_param_data`` (lines 63-77) takes each parameter's fp32 ``main_param``, which both
mixed-precision optimizers set (``core/optimizer/optimizer.py`` 1021, ``distrib_optimizer.py``
457), under ``--bf16`` and ``param.data`` otherwise; its ``param.data.float()`` runs only for a
bf16 parameter without a master; eight ``_compute_norm_2`` (``multi_tensor_l2norm`` and
``norm * norm`` for the two lists that are not empty, ``torch.zeros`` for the six that are, an
assumption of a dense model), six all-reduces, the sums, ``.item()``); ``log_interval``: every
``log_interval`` iterations ``training_log`` reduces the learning rate (``torch.tensor``,
all-reduce, two ``.item()``), adds and reads the loss and resets it (3 ops, 2 reads), and reads
the ``interval-time`` timer with ``barrier=True`` (``torch.distributed.barrier()`` and
``torch.cuda.synchronize()``, ``MLM:megatron/core/timers.py::Timer``: a reduction and a read);
``tensorboard`` (``--tensorboard-dir``): the writer's scalars of the two CUDA loss values
(``.item()`` each); its other ``add_scalar`` calls are Python, not counted.

Result validation (Megatron-Core's re-run state machine, on by default), per iteration:

* ``rerun_mode`` ``validate_results`` (Megatron's default, ``MLM:megatron/training/config/
  resilience_config.py`` 21; ``--rerun-mode disabled`` turns it off): ``train_step`` runs the
  forward-backward in ``while rerun_state_machine.should_run_forward_backward(...)``
  (``MLM:megatron/training/training.py`` 3038), so after every forward-backward the state
  machine asks all ranks whether any wants a re-run (``MLM:megatron/core/
  rerun_state_machine.py`` 325-330 -> ``_reduce_any`` 267-270: ``torch.tensor([flag],
  device='cuda')``, an all-reduce over the world, ``.item()``), and before it saves the RNG
  states (``_save_state`` 964-983: ``torch.get_rng_state()``, ``torch.cuda.get_rng_state()``,
  an assumption that each costs an op; Python's and NumPy's states are Python, not counted):
  :data:`RERUN_CHECK`;
* with ``check_for_nan_in_loss`` (``--check-for-nan-in-loss-and-grad`` also sets the DDP's
  ``check_for_nan_in_grad``, ``training.py::get_megatron_ddp_config``) every gradient bucket
  is checked before its data-parallel reduction (``MLM:megatron/core/distributed/
  param_and_grad_buffer.py`` 345-370, ``check_grads`` from ``start_grad_sync`` 655-659):
  ``grad_data.norm(p=2)``, then ``validate_result`` with ``torch.isnan`` and with
  ``torch.isinf``, each tested in an ``if`` (an op and a read each, as the loss's):
  :data:`GRAD_CHECK` per bucket, one bucket per model chunk (an assumption: without
  ``--overlap-grad-reduce`` Megatron-Core makes one bucket per gradient buffer, and a dense
  model chunk has one buffer; with it, buckets of at least 40 M parameters, one for the
  small models this matters for; MoE experts' own buffer not counted). The reads fall at the
  end of the backward, before the gradients' reduction; charged with the step's other work
  (an assumption: both leave the device idle while the host issues what follows).
"""

from __future__ import annotations

from typing import Any

from sim.engine.step_host import StepHost
from sim.framework.options import Option
from sim.framework.per_token_loss import STEP_HOST as PER_TOKEN_HOST

_MLM = "MLM:megatron"
_ON = (False, True)

OPTIMIZER_STEP = StepHost(
    ops=2 + 3 + 5 + 4 + 1,
    per_optimizer_tensor=1,
    per_sharded_tensor=3 + 3,
    per_dense_tensor=1,
    reductions=1,
    source=f"{_MLM}/core/optimizer/optimizer.py::MixedPrecisionOptimizer.step, "
    "distrib_optimizer.py, clip_grads.py (module doc)",
)
"""``optimizer.step()`` with bf16 weights and gradient clipping (Megatron's default
``--clip-grad 1.0``): norm (2 zeros, l2norm, ``** 2``, ``pow``), clip (zeros, add, divide,
clamp, scale: 5), FusedAdam (4), the copy back or the all-gather's launch (1); ``.detach()``
per optimizer tensor; the distributed optimizer's 3 + 3 per shard tensor, the fp16
optimizer's ``.float()`` per tensor (its copy back is the 1 fixed op)."""

STEP_TAIL = StepHost(
    ops=1 + 1 + 2 + 3 + 0,
    reads=2 + 3 + 1,
    reductions=3,
    source=f"{_MLM}/training/training.py::train_step (update_successful, grad_norm, loss "
    "reductions) and train (get_loss_scale().item())",
)
"""``train_step``'s reductions and the loss scale's read (module doc): ``torch.tensor`` twice
(each a read), the loss's ``vstack``, ``sum``, two selects and a divide; three all-reduces;
``.item()`` once for the flag, twice for the norm, once for the loss scale."""

FP16_CHECK = StepHost(
    ops=2,
    reads=1,
    reductions=1,
    source=f"{_MLM}/core/optimizer/optimizer.py::_unscale_main_grads_and_check_for_nan "
    "(found_inf.fill_, _amp_foreach_non_finite_check_and_unscale_, all-reduce, .item())",
)
"""The fp16 loss scaler's found-inf check."""

COUNT_ZEROS = StepHost(
    ops=1 + 1,
    per_optimizer_tensor=4,
    reads=1 + 3,
    reductions=2,
    source=f"{_MLM}/core/optimizer/clip_grads.py::count_zeros_fp32 and training.py::"
    "train_step (reduce_max_stat_across_model_parallel_group)",
)
"""``--log-num-zeros-in-grad``: ``torch.zeros``; per tensor ``.detach()``, ``count_nonzero``,
``numel -``, ``+``; the all-reduce and ``.item()``; then ``torch.tensor`` (a read), an
all-reduce and two ``.item()``."""

PARAMS_NORM = StepHost(
    ops=2 * 3 + 6 + 3 + 4,
    reads=2 + 1,
    reductions=6,
    source=f"{_MLM}/training/utils/common_utils.py::calc_params_l2_norm",
)
"""``--log-params-norm``: two non-empty norm lists (each its overflow buffer's
``torch.tensor([0])``, a read, then l2norm and the square: 3 ops), six empty ones
(``torch.zeros``), three sums of the dense norms, four of the expert norms, six all-reduces,
``.item()`` (an assumption of a dense model: its expert lists empty). No op per tensor: the
norm reads each parameter's fp32 master (``main_param``) or, without ``--bf16``, its data
(``_get_param_data``, common_utils.py 63-77 at d98e8a64; the same branch at a73b4d2d4a,
``training/utils.py`` 105-119); until 2026-11-30 a ``param.data.float()`` per tensor was
charged, which Megatron's optimizers never run."""

TRAINING_LOG = StepHost(
    ops=3,
    reads=3 + 2 + 1,
    reductions=2,
    source=f"{_MLM}/training/training.py::training_log (learning rate reduced, loss added, "
    "read and reset, interval-time with barrier=True) and core/timers.py::Timer",
)
"""One ``training_log`` at a log iteration (module doc): ``torch.tensor`` of the learning
rate, the loss's add and reset (3 ops); reads: the two tensors from Python values, the
learning rate's two ``.item()``, the loss's, the timer's synchronize (6); the learning rate's
all-reduce and the barrier."""

TENSORBOARD = StepHost(
    reads=2,
    source=f"{_MLM}/training/training.py::training_log (writer.add_scalar of the loss tensors)",
)
"""The tensorboard writer's reads of the loss, at a log iteration."""

RERUN_CHECK = StepHost(
    ops=2,
    reads=2,
    reductions=1,
    source=f"{_MLM}/core/rerun_state_machine.py::should_run_forward_backward (_save_state, "
    "_reduce_any over the world) from training.py::train_step",
)
"""``rerun_mode`` ``validate_results``: the two RNG-state reads of ``_save_state``, the flag's
``torch.tensor`` (a read), its all-reduce over the world and ``.item()`` (module doc)."""

GRAD_CHECK = StepHost(
    ops=3,
    reads=2,
    source=f"{_MLM}/core/distributed/param_and_grad_buffer.py::check_grads (per bucket)",
)
"""One gradient bucket's NaN and Inf check (module doc): ``norm``, ``isnan``, ``isinf`` and
the two reads of ``validate_result``."""

RERUN_MODES = ("validate_results", "disabled")
"""``--rerun-mode`` values pipesim times; ``report_stats`` re-runs every iteration's
forward-backward once (``rerun_state_machine.py``: ``rerun_requested = True`` in
``validate_result``), not modelled."""

LOSS_READS = 2
"""Blocking reads of the loss after each forward of the last stage with
``check_for_nan_in_loss_and_grad`` (Megatron's default): ``pretrain_gpt.py::loss_func`` calls
``rerun_state_machine.validate_result`` with ``torch.isnan`` and with ``torch.isinf``, each of
which tests the resulting CUDA tensor in an ``if`` (``MLM:megatron/core/rerun_state_machine.py::
validate_result``): an op and a read each."""

HOST_OPTIONS: tuple[Option, ...] = (
    Option(
        "transformer_impl",
        "transformer_engine",
        ("transformer_engine", "local"),
        f"{_MLM}/core/transformer/transformer_config.py transformer_impl (default "
        "transformer_engine); --transformer-impl, --spec local",
        "Transformer Engine's modules in each layer, each costing the host its Python "
        "(HostOverhead.te_module_s) beyond a torch Linear; local: Megatron's own layers",
    ),
    Option(
        "check_for_nan_in_loss",
        True,
        _ON,
        f"{_MLM}/training/arguments.py --no-check-for-nan-in-loss-and-grad (on by default); "
        "pretrain_gpt.py::loss_func; core/rerun_state_machine.py::validate_result",
        "the loss read back twice after each last-stage forward (the host waits for it)",
    ),
    Option(
        "rerun_mode",
        "validate_results",
        RERUN_MODES,
        f"{_MLM}/training/config/resilience_config.py rerun_mode (default validate_results); "
        "--rerun-mode; core/rerun_state_machine.py::should_run_forward_backward",
        "validate_results: each iteration saves the RNG states and all-reduces a re-run flag "
        "over every rank, read back (a host wait)",
    ),
    Option(
        "log_num_zeros_in_grad",
        False,
        _ON,
        f"{_MLM}/training/arguments.py --log-num-zeros-in-grad; core/optimizer/clip_grads.py"
        "::count_zeros_fp32",
        "zeros in the gradients counted tensor by tensor at each step (host ops and reads)",
    ),
    Option(
        "log_params_norm",
        False,
        _ON,
        f"{_MLM}/training/arguments.py --log-params-norm; training/utils/common_utils.py::"
        "calc_params_l2_norm",
        "the parameters' norm reduced and read at each step (host ops and reads)",
    ),
    Option(
        "log_interval",
        100,
        (),
        f"{_MLM}/training/arguments.py --log-interval (default 100); training.py::training_log",
        "iterations between logs: each log reduces and reads scalars behind a barrier",
    ),
    Option(
        "tensorboard",
        False,
        _ON,
        f"{_MLM}/training/arguments.py --tensorboard-dir; training.py::training_log",
        "the last rank writes tensorboard scalars at each log (reads of the loss)",
    ),
)
"""The options of Megatron-LM's logging that add host work (module doc)."""


def megatron_step_host(values: dict[str, Any], fp16: bool, chunks: int = 1) -> StepHost:
    """Megatron-LM's host work per iteration with option ``values`` (module doc), the loss
    scaler's check with ``fp16``; the log's share amortised over ``log_interval`` iterations;
    with ``per_token_loss`` the finalize's scaling of the gradients
    (:data:`sim.framework.per_token_loss.STEP_HOST`); the re-run check with ``rerun_mode``
    ``validate_results`` and, with ``check_for_nan_in_loss``, the gradient check of each of the
    rank's ``chunks`` model chunks (one bucket each).

    Raises:
        ValueError: ``log_interval`` below 1.

    Example:
        >>> w = megatron_step_host({"log_interval": 1, "log_num_zeros_in_grad": True}, False)
        >>> w.per_optimizer_tensor, w.reads, w.reductions
        (5.0, 16.0, 8.0)
        >>> round(megatron_step_host({}, False).reads, 2)  # logs every 100 iterations
        6.06
        >>> on = {"rerun_mode": "validate_results", "check_for_nan_in_loss": True}
        >>> w = megatron_step_host(on, False, chunks=2)
        >>> round(w.reads, 2), w.ops - megatron_step_host({}, False).ops  # 2 + 2 x 2; 2 + 2 x 3
        (12.06, 8.0)
    """
    interval = int(values.get("log_interval", 100))
    if interval < 1:
        raise ValueError(f"option log_interval must be >= 1, got {interval}")
    work = OPTIMIZER_STEP + STEP_TAIL
    if fp16:
        work = work + FP16_CHECK
    if values.get("log_num_zeros_in_grad"):
        work = work + COUNT_ZEROS
    if values.get("log_params_norm"):
        work = work + PARAMS_NORM
    log = TRAINING_LOG + (TENSORBOARD if values.get("tensorboard") else StepHost())
    work = work + _amortised(log, interval)
    if values.get("per_token_loss"):  # the finalize's scaling (sim.framework.per_token_loss)
        work = work + PER_TOKEN_HOST
    if values.get("rerun_mode") == "validate_results":
        work = work + RERUN_CHECK
    if values.get("check_for_nan_in_loss"):
        for _ in range(max(1, chunks)):
            work = work + GRAD_CHECK
    return work


def _amortised(work: StepHost, interval: int) -> StepHost:
    """``work`` done once every ``interval`` iterations, as a per-iteration mean."""
    if interval == 1:
        return work
    return StepHost(
        ops=work.ops / interval,
        per_tensor=work.per_tensor / interval,
        reads=work.reads / interval,
        reductions=work.reductions / interval,
        source=f"{work.source} (every {interval} iterations)",
    )


__all__ = [
    "GRAD_CHECK",
    "HOST_OPTIONS",
    "LOSS_READS",
    "RERUN_CHECK",
    "RERUN_MODES",
    "megatron_step_host",
]
