"""How each Megatron-LM argument bears on a prediction: the table :mod:`sim.runs.megatron_args`
reads.

Names are the command-line flags of ``megatron/training/arguments.py`` (and the
``TransformerConfig`` / ``TrainingConfig`` fields it turns into flags through
``ArgumentGroupFactory``) at NVIDIA/Megatron-LM@d98e8a64dd, without the leading ``--``. The
flags a run sets but that change neither iteration time nor memory are *ignored* with the
reason of their group; flags that change them a little are *approximated* (the reason says how
much); flags that change them and that pipesim cannot express are *unmapped*, or *conditional*
when they only matter for some layouts (an overlap of data-parallel gradients with ``dp = 1``
overlaps nothing). Everything else that changes the answer is mapped by
:mod:`sim.runs.megatron_args` (:data:`MAPPED`). A flag in none of these tables is unknown:
``sim import`` refuses an unknown flag of an argument list (it might change the answer), and
ignores one printed in a log's arguments block (a log prints every argument, set or not).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from sim.parallel.layout import ParallelLayout

MAPPED = frozenset(
    {
        "num-layers", "encoder-num-layers", "decoder-num-layers", "hidden-size",
        "num-attention-heads", "ffn-hidden-size", "kv-channels", "group-query-attention",
        "num-query-groups", "seq-length", "encoder-seq-length", "decoder-seq-length", "vocab-size", "padded-vocab-size", "tokenizer-type",
        "make-vocab-size-divisible-by", "vocab-file", "merge-file", "tokenizer-model",
        "swiglu", "squared-relu", "untie-embeddings-and-output-weights",
        "position-embedding-type", "use-rotary-position-embeddings", "normalization",
        "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
        "moe-shared-expert-intermediate-size", "moe-layer-freq", "first-k-dense-replace",
        "multi-latent-attention", "q-lora-rank", "kv-lora-rank", "qk-head-dim",
        "qk-pos-emb-head-dim", "v-head-dim", "qk-layernorm", "mtp-num-layers",
        "mtp-use-repeated-layer", "tensor-model-parallel-size", "pipeline-model-parallel-size",
        "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
        "context-parallel-size", "cp-comm-type", "expert-model-parallel-size",
        "expert-tensor-parallel-size", "sequence-parallel", "micro-batch-size",
        "global-batch-size", "bf16", "fp16", "fp8-format", "fp8-recipe", "fp4-format",
        "fp8-param-gather", "reuse-grad-buf-for-mxfp8-param-ag",
        "fp4-recipe", "recompute-granularity", "recompute-method", "recompute-num-layers",
        "recompute-modules", "recompute-activations", "use-distributed-optimizer",
        "optimizer", "attention-backend", "use-flash-attn", "transformer-impl",
        "num-distributed-optimizer-instances", "moe-latent-size", "hybrid-layer-pattern", "hybrid-override-pattern", "is-hybrid-model", "mamba-num-heads",
        "mamba-head-dim", "mamba-num-groups", "mamba-state-dim",
        "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "spec", "world-size", "nproc-per-node",
        "nnodes", "moe-token-dispatcher-type", "num-gpus", "num-nodes", "moe-expert-capacity-factor",
        "moe-pad-expert-input-to-capacity", "use-transformer-engine-op-fuser",
    }
)  # fmt: skip
"""Flags :mod:`sim.runs.megatron_args` maps to fields of the run."""

_LOG = "logging and monitoring, written around the step: no work in it"
_CKPT = (
    "checkpoint saving and loading: outside the timed steps (a save step is an outlier "
    "the warm-up rule's median drops)"
)
_DATA = (
    "data and tokenizer files and the data loader: pipesim assumes the next batch is "
    "ready (data loading hidden under the step)"
)
_LR = "learning-rate schedule or optimizer hyperparameter: changes the numbers, not the work"
_INIT = "initialisation and random seeds: before the first step"
_EVAL = "evaluation between training steps: outside the timed steps"
_RUN = "run length, exit and restart control: which steps run, not what one step costs"
_DIST = "process-group and launcher set-up: before the first step"
_NUM = "numerics only (loss scaling, dropout, precision of a reduction's sum): same kernels"

PREFIX_IGNORED: tuple[tuple[str, str], ...] = (
    ("log-", _LOG), ("tensorboard-", _LOG), ("wandb-", _LOG), ("timing-log-", _LOG),
    ("one-logger", _LOG), ("logging-", _LOG), ("save", _CKPT), ("load", _CKPT),
    ("ckpt-", _CKPT), ("dist-ckpt-", _CKPT), ("async-", _CKPT), ("non-persistent-", _CKPT),
    ("use-persistent-ckpt", _CKPT), ("data-", _DATA), ("train-data", _DATA),
    ("valid-data", _DATA), ("test-data", _DATA), ("mock-data", _DATA), ("fim-", _DATA),
    ("lr", _LR), ("min-lr", _LR), ("adam-", _LR), ("weight-decay", _LR), ("sgd-", _LR),
    ("muon-", _LR), ("eval-", _EVAL), ("exit-", _RUN), ("rerun-", _RUN), ("ft-", _RUN),
    ("inprocess-", _RUN), ("distributed-timeout", _DIST), ("wgrad-deferral", _NUM),
)  # fmt: skip
"""Flag prefixes ignored, with the reason of their group."""

IGNORED: dict[str, str] = {
    "tensorboard-dir": _LOG, "tensorboard-queue-size": _LOG, "timing-log-level": _LOG,
    "profile": _LOG, "profile-step-start": _LOG, "profile-step-end": _LOG,
    "finetune": _CKPT, "pretrained-checkpoint": _CKPT, "use-checkpoint-args": _CKPT,
    "use-checkpoint-opt-param-scheduler": _CKPT,
    "override-opt-param-scheduler": _CKPT, "auto-detect-ckpt-format": _CKPT,
    "no-load-optim": _CKPT, "no-load-rng": _CKPT, "no-save-optim": _CKPT,
    "no-ckpt-fully-parallel-save": _CKPT, "verify-integrity": _CKPT,
    "no-ckpt-load-validate-sharding-integrity": _CKPT, "split": _DATA, "num-workers": _DATA,
    "dataloader-type": _DATA, "dataloader-seq-length": _DATA, "no-mmap-bin-files": _DATA,
    "no-create-attention-mask-in-dataloader": _DATA, "tiktoken-pattern": _DATA,
    "vocab-extra-ids": _DATA, "reset-position-ids": _DATA, "reset-attention-mask": _DATA,
    "eod-mask-loss": _DATA, "decoupled-lr": _LR, "decoupled-min-lr": _LR, "clip-grad": _LR,
    "start-weight-decay": _LR, "end-weight-decay": _LR, "weight-decay-incr-style": _LR,
    "init-method-std": _INIT, "seed": _INIT, "init-method-xavier-uniform": _INIT,
    "train-iters": _RUN, "train-samples": _RUN, "skip-train": _RUN,
    "step-batch-size-schedule": _RUN, "distributed-backend": _DIST,
    "local-rank": _DIST, "use-mcore-models": "the default model implementation (Megatron-Core)",
    "disable-gloo-process-groups": _DIST, "enable-experimental": _DIST,
    "use-tp-pp-dp-mapping": "rank order of the groups; pipesim places tp innermost either way "
    "on one NVLink domain",
    "hidden-dropout": _NUM, "attention-dropout": _NUM, "loss-scale": _NUM,
    "initial-loss-scale": _NUM, "min-loss-scale": _NUM, "loss-scale-window": _NUM,
    "hysteresis": _NUM, "attention-softmax-in-fp32": _NUM, "accumulate-allreduce-grads-in-fp32":
    _NUM, "apply-query-key-layer-scaling": _NUM, "apply-residual-connection-post-layernorm":
    _NUM, "apply-layernorm-1p": _NUM, "norm-epsilon": _NUM, "layernorm-epsilon": _NUM,
    "rotary-base": _NUM, "rotary-percent": _NUM, "rotary-interleaved": _NUM,
    "rotary-scaling-factor": _NUM, "rotary-seq-len-interpolation-factor": _NUM,
    "use-rope-scaling": _NUM, "mscale": _NUM, "mscale-all-dim": _NUM, "rope-type": _NUM,
    "moe-aux-loss-coeff": _NUM, "moe-z-loss-coeff": _NUM, "moe-router-topk-scaling-factor":
    _NUM, "moe-router-bias-update-rate": _NUM, "moe-input-jitter-eps": _NUM,
    "moe-router-dtype": _NUM, "moe-router-pre-softmax": _NUM, "moe-router-num-groups": _NUM,
    "moe-router-group-topk": _NUM,
    "moe-router-score-function": _NUM, "mtp-loss-scaling-factor": _NUM,
    "no-check-for-nan-in-loss-and-grad": _NUM,
    "check-for-nan-in-loss-and-grad": _NUM, "check-for-large-grads": _NUM,
    "ddp-average-in-collective": _NUM,
    "te-rng-tracker": _INIT, "test-mode": _RUN, "bert-no-binary-head": _NUM,
    "export-te-mcore-model": _CKPT,
    "ddp-pad-buckets-for-high-nccl-busbw": "bucket padding to a multiple of 2^16 elements: "
    "bytes, not time", "manual-gc": "Python garbage collection at fixed steps: host time "
    "between steps", "manual-gc-interval": "as --manual-gc", "high-priority-stream-groups":
    "CUDA stream priorities: ordering, not work", "disable-vision-class-token": _NUM,
}  # fmt: skip
"""Flags that change neither iteration time nor memory, with the reason."""

OFFLOAD = (
    "activation offloading to host memory (Megatron-Core cpu_offloading of the first N "
    "layers, or fine_grained_activation_offloading of the listed modules: megatron/core/"
    "cpu_offload.py, megatron/core/pipeline_parallel/fine_grained_activation_offload.py): the "
    "offloaded activations are counted on the GPU (the predicted peak is above the run's by "
    "up to their bytes) and the device-to-host copies, which Megatron overlaps with the next "
    "layers' compute, are not timed"
)
"""Why the activation-offloading flags are approximated."""

APPROXIMATED: dict[str, str] = {
    "disable-bias-linear": "no bias vectors in the linear layers: the generators' GPT layers "
    "have them (h or 4h parameters per matrix, under 0.1 % of a layer's bytes and time)",
    "add-bias-linear": "bias vectors in the linear layers: the decoder generator has none "
    "(under 0.1 % of a layer's bytes and time)",
    "no-gradient-accumulation-fusion": "weight gradients accumulated by a separate add kernel "
    "instead of inside the GEMM: one memory-bound pass over each weight gradient per "
    "micro-batch, not modelled",
    "log-params-norm": "the parameters' norm computed each logged step: one read of the "
    "weights (memory-bound, params x 2 B / HBM bandwidth), not modelled",
    "log-num-zeros-in-grad": "zeros counted in the gradients each logged step: one read of "
    "them, not modelled",
    "check-weight-hash-across-dp-replicas-interval": "the weights hashed every N steps to "
    "compare replicas: one read of them every N steps, not modelled",
    "deterministic-mode": "deterministic kernels and NCCL_ALGO=Ring (the functional tests' "
    "setting): torch.use_deterministic_algorithms(True) fills every new torch.empty with NaN "
    "(ATen native/cuda/TensorFactories.cu empty_cuda); Megatron-LM's reading maps it to the "
    "megatron-lm option deterministic_mode (host ops of the fills, sim.framework."
    "deterministic); the fills' device writes and NCCL's ring-only choice are not modelled",
    "cross-entropy-loss-fusion": "fused cross-entropy: fewer passes over the logits "
    "(the shape's cross_entropy_fusion: its memory, sim.memory.layer_work; its kernels and host "
    "ops, sim.compute.loss_fusion, on decoder models and GPT/BERT traces alike)",
    "cross-entropy-fusion-impl": "as --cross-entropy-loss-fusion",
    "moe-permute-fusion": "fused token permutation: fewer memory-bound kernels, not modelled",
    "moe-router-fusion": "fused router: one top-k kernel each way (sim.compute.moe), its "
    "random logits and balancing loss as counted kernels (sim.compute.router_fused)",
    "moe-paged-stash": "the fused grouped MLP's saved tensors copied into pages and back "
    "(sim.compute.paged_stash, timed in line); the pages' memory counted as the activations "
    "they hold",
    "no-moe-router-fusion": "a Megatron-Bridge recipe's moe_router_fusion=False: the eager "
    "router's counted kernels (sim.compute.router_unfused)",
    "moe-grouped-gemm": "experts' GEMMs grouped into one kernel: pipesim times each local "
    "expert's GEMM on its own (kernel model)",
    "moe-router-load-balancing-type": "the router's balancing loss; pipesim routes tokens "
    "evenly (balanced, dropless)", "moe-router-padding-for-quantization": "token padding "
    "of each expert to a multiple of 16/32 rows, not modelled",
    "no-persist-layer-norm": "layer-norm kernel choice, not modelled",
    "no-masked-softmax-fusion": "unfused softmax (memory-bound), not modelled",
    "no-bias-gelu-fusion": "unfused bias + GeLU (memory-bound), not modelled",
    "no-bias-swiglu-fusion": "unfused bias + SwiGLU (memory-bound), not modelled",
    "no-bias-dropout-fusion": "unfused bias + dropout (memory-bound), not modelled",
    "no-rope-fusion": "unfused rotary embedding (memory-bound), not modelled",
    "use-fused-weighted-squared-relu": "fused activation kernel, not modelled",
    "ddp-num-buckets": "bucket count of the overlapped gradient reduction (the size "
    "rule's buckets are simulated)", "cuda-graph-warmup-steps": "CUDA-graph capture warm-up: "
    "before the timed steps",
    "defer-embedding-wgrad-compute": "the embedding's weight-gradient GEMM deferred to the "
    "pipeline flush", "microbatch-group-size-per-virtual-pipeline-stage": "interleaved "
    "schedule's micro-batch grouping: pipesim runs torch's rounds of m // max(1, m // p) "
    "micro-batches (Megatron's default group of p when m is a multiple of p), not the group "
    "size given",
    "overlap-p2p-communication-warmup-flush": "pipeline sends of warm-up and flush overlapped",
    "overlap-p2p-communication": "pipeline sends overlapped with compute (interleaved "
    "schedule)", "no-use-layer-wise-param-layout": "the layer-wise optimizer's legacy "
    "buffer (every parameter in one LayerWise buffer, gathered by allgather_params(); "
    "megatron/training/arguments.py lines 3160-3168): the same bytes gathered; the slower "
    "path Megatron's help names is not modelled", "fine-grained-activation-offloading": OFFLOAD, "offload-modules": OFFLOAD,
    "cpu-offloading": OFFLOAD, "cpu-offloading-num-layers": OFFLOAD,
    "cpu-offloading-activations": OFFLOAD, "cpu-offloading-weights": OFFLOAD,
    "use-packed-sequence": "packed sequences (THD, several documents per sequence): the "
    "attention core runs causal over each whole sequence of --seq-length tokens, an upper "
    "bound (the documents' lengths, which shorten it, are not in the arguments); the GEMMs and "
    "memory are the same", "max-position-embeddings": "size of the learned position table (GPT): "
    "pipesim's GPT generator sizes it by the sequence length",
}  # fmt: skip
"""Flags that change time or memory a little; the run is simulated without them."""

UNMAPPED: dict[str, str] = {
    "fp8-param": "FP8 weights (issue 26 item 1, precision)",
    "outer-dp-sharding-strategy": "hybrid FSDP with Megatron's outer distributed-optimizer "
    "instances (HSDP over num_distributed_optimizer_instances)",
    "optimizer-cpu-offload": "optimizer state offloaded to the host by Megatron's hybrid CPU "
    "optimizer (not a pipesim policy)", "optimizer-offload-fraction": "as "
    "--optimizer-cpu-offload",     "num-layers-in-first-pipeline-stage": "uneven first stage",
    "num-layers-in-last-pipeline-stage": "uneven last stage",
    "hierarchical-context-parallel-sizes": "hierarchical context parallelism without "
    "--cp-comm-type a2a+p2p", 
    "overlap-cpu-optimizer-d2h-h2d": "CPU "
    "optimizer overlap", "patch-dim": "vision transformer inputs (not a decoder)",
    "img-h": "vision inputs", "img-w": "vision inputs",
}  # fmt: skip
"""Flags that change time or memory and that pipesim cannot express yet, with the work that
would express them."""


Predicate = Callable[[ParallelLayout, bool], bool]
"""Whether a conditional flag matters for a layout (and whether the distributed optimizer is
on)."""

CONDITIONAL: dict[str, tuple[Predicate, str, str]] = {}
"""Flags that matter only for some layouts: (matters?, reason when it does, reason when not).
The overlap, CUDA-graph and dispatcher flags, which became options of the ``megatron-lm``
profile, are read by :mod:`sim.runs.megatron_overlap` instead."""


def classify(flag: str) -> tuple[str, str] | None:
    """``(status, reason)`` of a flag from the fixed tables (``ignored``, ``approximated``,
    ``unmapped``), None for a mapped, conditional or unknown flag.

    Example:
        >>> classify("lr-decay-style")[0], classify("fp8-param")[0], classify("swiglu")
        ('ignored', 'unmapped', None)
    """
    if flag in MAPPED or flag in CONDITIONAL:
        return None
    if flag in IGNORED:
        return "ignored", IGNORED[flag]
    if flag in APPROXIMATED:
        return "approximated", APPROXIMATED[flag]
    if flag in UNMAPPED:
        return "unmapped", UNMAPPED[flag]
    for prefix, reason in PREFIX_IGNORED:
        if flag.startswith(prefix):
            return "ignored", reason
    return None


def nearest_flag(flag: str) -> str | None:
    """The flag of the tables that ``flag`` misspells (a close spelling: Megatron's argparse
    refuses an unknown flag, so a launch that ran did not have it), or None.

    Example:
        >>> nearest_flag("tensor-model-paralel-size"), nearest_flag("warp-drive")
        ('tensor-model-parallel-size', None)
    """
    known = [*MAPPED, *CONDITIONAL, *IGNORED, *APPROXIMATED, *UNMAPPED]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.85)
    return close[0] if close else None
