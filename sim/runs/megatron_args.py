"""Megatron-LM's arguments as a :class:`~sim.runs.record.MeasuredRun`.

The arguments come as flags (``{"tensor-model-parallel-size": "8", "bf16": True}``): from a
``pretrain_gpt.py`` command line (:mod:`sim.runs.argv`), from a functional test's
``MODEL_ARGS``, from the arguments block a training log prints (``tensor_model_parallel_size
...... 8``), or from a Megatron-Bridge config's fields (:mod:`sim.runs.bridge`). Each flag is
mapped, ignored, approximated or unmapped as :mod:`sim.runs.megatron_table` says; defaults and
derived sizes follow ``megatron/training/arguments.py::validate_args`` and
``megatron/core/transformer/transformer_config.py`` at NVIDIA/Megatron-LM@d98e8a64dd:

* ``ffn_hidden_size``: ``4 h``, or ``int(4 h * 2/3 / 64) * 64`` with ``--swiglu``;
  ``moe_ffn_hidden_size``: ``ffn_hidden_size``; ``kv_channels``: ``h / heads``;
  ``num_query_groups``: the heads unless ``--group-query-attention``;
* the padded vocabulary: the tokenizer's size rounded up to a multiple of
  ``make_vocab_size_divisible_by (128) x tp`` (``megatron/training/vocab_utils.py``);
* ``dp = world / (tp x pp x cp)``;
* recompute: ``--recompute-granularity full --recompute-method uniform`` recomputes every
  layer (``recompute:full``), ``block`` the first ``--recompute-num-layers`` of each stage
  (``recompute:full:N``; 0: none), ``selective`` the modules of ``--recompute-modules``
  (default ``core_attn``) (``transformer_block.py::_checkpointed_forward``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sim.compute.precision import HIGH_PRECISION
from sim.memory.te_attention import TeEnvironment
from sim.parallel.layout import ParallelLayout
from sim.runs import megatron_table as table
from sim.runs.argv import switch_on
from sim.runs.megatron_host_flags import read_host_options
from sim.runs.megatron_model_flags import (
    activation_offload,
    optimizer_instances,
    pattern_layout,
    uneven_layout,
)
from sim.runs.megatron_overlap import read_options
from sim.runs.megatron_reading import Reading
from sim.runs.megatron_shape import model_shape
from sim.runs.pipeline_layout import parse_layout, split_layout
from sim.runs.precision_flags import precision_flags
from sim.runs.record import ArgNote, MeasuredRun
from sim.runs.te_environment import LATER, run_attention


def normalise(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags spelled as the command line spells them (``-``, no ``--``), values as given;
    absent-valued ones (``None``, ``False``: a log's arguments block prints them) dropped."""
    out: dict[str, Any] = {}
    for name, value in flags.items():
        key = name.lstrip("-").replace("_", "-")
        if value is None or value is False or value in ("None", "False", "false"):
            if key == "gradient-accumulation-fusion" and value in (False, "False", "false"):
                out["no-gradient-accumulation-fusion"] = True
            continue
        out[key] = True if value in ("True", "true") else value
    return out


def read_megatron(
    flags: Mapping[str, Any],
    *,
    name: str,
    source: str,
    strict: bool = True,
    arch: str | None = None,
    gpu: str = "",
    num_gpus: int | None = None,
    framework: str = "megatron-lm",
    te_env: TeEnvironment = LATER,
) -> MeasuredRun:
    """The run Megatron-LM's ``flags`` describe (module doc); nothing measured yet.

    Args:
        flags: flag -> value (any spelling :func:`normalise` accepts).
        name, source: the run's name and where the flags came from.
        strict: an unknown flag is ``unmapped`` (an argument list the user wrote), else
            ``ignored`` (a log's arguments block, which prints every argument).
        arch: ``gpt``/``decoder``, ``bert``, ``t5``, ``hybrid`` when the caller knows the
            training script (``pretrain_bert.py``...); default: decided from the flags.
        gpu: the GPU as the user names it; num_gpus: the job's GPUs (``--world-size`` or the
            launcher's ``--nproc-per-node x --nnodes`` when not given).
        framework: ``megatron-lm`` or ``megatron-bridge``.
        te_env: the Transformer Engine and flash-attn the run had (its attention backend
            under ``--deterministic-mode``; :mod:`sim.runs.te_environment`).
    """
    r = Reading(normalise(flags), strict)
    world = _world(r)  # the launcher's flags are read (mapped) even when num_gpus is given
    world = num_gpus or world
    lay, dist = _layout(r, world)
    shape, seq = model_shape(r, lay, arch, grouped=framework == "megatron-bridge")
    if _dropout(r, framework):
        shape = replace(shape, features=(*shape.features, "dropout=true"))
    if not _fused_weighting(r, framework):
        shape = replace(shape, features=(*shape.features, "moe_weighting=unfused"))
    if r.flags.get("num-experts") and r.flags.get("moe-token-dispatcher-type") == "alltoall":
        # its second permutation, rows sorted by local expert (sim.compute.moe_sort)
        shape = replace(shape, features=(*shape.features, "moe_dispatcher=alltoall"))
    if _hybridep(r, lay):  # HybridEP's own permutation kernels (sim.compute.hybridep)
        shape = replace(shape, features=(*shape.features, "moe_dispatcher=hybridep"))
    if r.flags.get("num-experts") and r.switch("no-moe-router-fusion"):
        # stated off (a Bridge recipe: the Nemotron-H family's eager router,
        # sim.compute.router_unfused); absent, the one-kernel model stays (an approximation)
        shape = replace(shape, features=(*shape.features, "moe_router=unfused"))
    if switch_on(r.flags.get("cross-entropy-loss-fusion")):
        shape = replace(shape, features=(*shape.features, f"cross_entropy={_loss_fusion(r)}"))
    recompute = _recompute(r)
    precision = _precision(r)
    gather = r.switch("fp8-param-gather") and precision not in HIGH_PRECISION
    r.mapped("fp8-param-gather", "training.precision_options.param_gather (FP8 parameters)")
    kept16 = precision_flags(r, precision)
    mbs, gbs = r.int("micro-batch-size", 1), r.int("global-batch-size")
    r.mapped("micro-batch-size", "micro-batch size b")
    r.mapped("global-batch-size", "samples per optimizer step")
    options = _options(r, lay, dist)
    memory = _memory_options(r, dist) | _grad_buffer(r) | _allocator(r)
    memory |= flag_memory_options(r.flags)
    layout = _pipeline_layout(r, lay)
    instances = optimizer_instances(r, lay, dist)
    offload = activation_offload(r, shape.layers or 0)
    _conditional(r, lay, dist)
    _rest(r, lay)
    sched = "interleaved_1f1b" if lay.vp > 1 else "1f1b"
    attention = _attention(r.flags, framework, gpu, te_env)
    return MeasuredRun(
        name=name,
        source=source,
        framework=framework,
        gpu=gpu,
        num_gpus=world,
        layout=lay,
        microbatch_size=mbs,
        global_batch=gbs,
        seq_len=seq,
        precision=precision,
        param_gather=gather,
        precision_options=tuple(kept16.items()),
        recompute=recompute,
        schedule=sched,
        attention=attention,
        distributed_optimizer=dist,
        shape=shape,
        args=tuple(r.notes),
        notes=tuple(r.assumptions),
        framework_options=tuple(options.items()),
        memory_options=tuple(memory.items()),
        pipeline_layout=layout,
        optimizer_instances=instances,
        activation_offload=offload,
        token_dispatcher=_dispatcher(r.flags, lay),
        optimizer=OPTIMIZERS.get(str(r.flags.get("optimizer", "adam")), "adam"),
    )


OPTIMIZERS = {"adam": "adam", "sgd": "sgd_momentum", "muon": "sgd_momentum",
              "dist_muon": "sgd_momentum"}  # fmt: skip
"""Megatron's ``--optimizer`` -> ``training.optimizer`` (its state per parameter,
:mod:`sim.memory.states`): SGD keeps a momentum buffer (``--sgd-momentum`` 0.9 by default),
Muon one momentum buffer per matrix (below)."""
MUON = (
    "Muon (--optimizer muon / dist_muon) counted as SGD with momentum: the fp32 master and one "
    "momentum buffer per parameter (Megatron-Core's TensorParallelMuon keeps one momentum per "
    "2-D weight; the embedding, output layer and norms it leaves to Adam, whose second moment "
    "is not counted: NVIDIA/Megatron-LM@d98e8a64 megatron/core/optimizer/"
    "emerging_optimizers.py lines 177-200 and 579-590); the 5 Newton-Schulz iterations per "
    "matrix (about 5 x (4 m^2 n + 2 m^3) FLOPs for an m x n weight, m <= n) are not timed"
)
"""What the simulation changes of a Muon run."""


def _hybridep(r: Reading, lay: ParallelLayout) -> bool:
    """Whether the experts are dispatched by the flex dispatcher's HybridEP backend with its
    standalone permute kernels (:mod:`sim.compute.hybridep`): ``flex`` with
    ``--moe-flex-dispatcher-backend hybridep`` over more than one expert rank (as
    :mod:`sim.runs.megatron_overlap` reads it), without ``moe_permute_fusion_into_hybridep``
    (Megatron-Core's default)."""
    fused = r.switch("moe-permute-fusion-into-hybridep")
    r.mapped("moe-permute-fusion-into-hybridep", "HybridEP's permutation inside its dispatch "
             "kernel: approximated by the all-to-all dispatcher's permute kernels "
             "(MoEShape.hybridep off)")  # fmt: skip
    flags = r.flags
    return bool(
        flags.get("num-experts") and lay.ep > 1 and not fused
        and flags.get("moe-token-dispatcher-type") == "flex"
        and flags.get("moe-flex-dispatcher-backend") == "hybridep"
    )  # fmt: skip


def _dispatcher(flags: dict[str, Any], lay: ParallelLayout) -> str:
    """``allgather`` for Megatron's all-gather token dispatcher with experts spread over ranks
    (its default when the flag is absent, ``megatron/training/arguments.py``), else
    ``alltoall`` (the flex dispatchers are framework options)."""
    if not flags.get("num-experts") or lay.ep * lay.tp == 1:
        return "alltoall"
    disp = str(flags.get("moe-token-dispatcher-type", "allgather"))
    return "allgather" if disp == "allgather" else "alltoall"


def _options(r: Reading, lay: ParallelLayout, dist: bool) -> dict[str, str]:
    """The overlap, CUDA-graph and dispatcher flags (:mod:`sim.runs.megatron_overlap`) and
    the logging flags that add host work (:mod:`sim.runs.megatron_host_flags`) as framework
    options, each noted."""
    options, notes = read_options(r.flags, lay, dist)
    host, host_notes = read_host_options(r.flags)
    options |= host
    for flag, status, reason in notes + host_notes:
        r.done.add(flag)
        r.notes.append(ArgNote(flag, str(r.flags.get(flag, "")), status, reason))
    return options


OPTIMIZER_DTYPES = {
    "main-grads-dtype": "main_grads_dtype", "main-params-dtype": "main_params_dtype",
    "exp-avg-dtype": "exp_avg_dtype", "exp-avg-sq-dtype": "exp_avg_sq_dtype",
}  # fmt: skip
"""Megatron's precision-aware optimizer flags -> :class:`~sim.config.MemoryConfig` fields."""
DTYPE_NAMES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16",
               "bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "uint8": "fp8"}  # fmt: skip
"""A dtype as Megatron's flags (``fp32``...) or Megatron-Bridge's configs (``bfloat16``...)
spell it -> pipesim's name."""


def _grad_buffer(r: Reading) -> dict[str, Any]:
    """``--grad-reduce-in-bf16`` as the experiment's ``memory: grad_reduce_in_bf16``: the
    gradient buffer in the parameters' 16-bit dtype instead of fp32 (Megatron-LM's
    ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32`` for ``--bf16`` unless this
    flag; NVIDIA/Megatron-LM@d98e8a64 ``megatron/training/arguments.py``; the buffer's dtype is
    ``DistributedDataParallelConfig.grad_reduce_in_fp32``,
    ``megatron/core/distributed/distributed_data_parallel.py:192``). Megatron-Bridge sets that
    field directly (its performance recipes set it False: NVIDIA-NeMo/Megatron-Bridge@067f987df0
    ``src/megatron/bridge/perf_recipes/_common.py:72-74``), so its configs reach here as this
    flag (:mod:`sim.runs.bridge_recipes`)."""
    if not r.switch("grad-reduce-in-bf16"):
        return {}
    r.mapped("grad-reduce-in-bf16", "memory: grad_reduce_in_bf16 (16-bit gradient buffer)")
    return {"grad_reduce_in_bf16": True}


def _allocator(r: Reading) -> dict[str, Any]:
    """The run's ``PYTORCH_CUDA_ALLOC_CONF`` (an environment variable, not a Megatron flag:
    Megatron-Bridge's performance scripts set it, :mod:`sim.runs.bridge_env`) as the
    experiment's ``memory: expandable_segments``."""
    conf = str(r.text("pytorch-cuda-alloc-conf", ""))
    if not conf:
        return {}
    r.mapped("pytorch-cuda-alloc-conf", "memory: expandable_segments (the caching allocator)")
    return {"expandable_segments": True} if "expandable_segments:True" in conf else {}


DETERMINISTIC_CUBLAS = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` of a ``--deterministic-mode`` run: Megatron sets it
(``megatron/training/determinism.py`` ``DETERMINISM_ENV_VAR_DEFAULTS``, NVIDIA/Megatron-LM@d98e8a64dd)."""


def workspace_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The workspaces and held buffers three flags add, as the experiment's ``memory:`` fields
    (the flags keep their time notes in :mod:`sim.runs.megatron_table`): ``--deterministic-mode``
    sizes PyTorch's cuBLAS workspaces (``cublas_workspace_config``, :mod:`sim.memory.
    cublas_workspace`), ``--moe-grouped-gemm`` with Transformer Engine adds TE's grouped-GEMM
    workspaces (``te_grouped_gemm``), ``--defer-embedding-wgrad-compute`` keeps the output
    layer's inputs and gradients of ``--wgrad-deferral-limit`` micro-batches
    (``defer_embedding_wgrad``)."""
    out: dict[str, Any] = {}
    if switch_on(flags.get("deterministic-mode")):
        out["cublas_workspace_config"] = DETERMINISTIC_CUBLAS
    if switch_on(flags.get("moe-grouped-gemm")) and flags.get("transformer-impl") != "local":
        out["te_grouped_gemm"] = True
    if switch_on(flags.get("defer-embedding-wgrad-compute")):
        try:
            out["defer_embedding_wgrad"] = max(0, int(float(flags.get("wgrad-deferral-limit", 0))))
        except (TypeError, ValueError):
            out["defer_embedding_wgrad"] = 0
    return out


def _loss_fusion(r: Reading) -> str:
    """``te`` or ``native``: the fused loss of ``--cross-entropy-loss-fusion`` (Megatron's
    default impl is ``native``), its passes over the logits timed by
    :mod:`sim.compute.loss_fusion` and its memory by :mod:`sim.memory.layer_work`, both from the
    model shape's ``cross_entropy_fusion`` (the ``cross_entropy`` feature)."""
    impl = "te" if str(r.flags.get("cross-entropy-fusion-impl", "native")) == "te" else "native"
    why = f"fused cross entropy ({impl}): its passes over the logits (sim.compute.loss_fusion)"
    r.mapped("cross-entropy-loss-fusion", why)
    r.mapped("cross-entropy-fusion-impl", why)
    return impl


def loss_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The weight-gradient flags as the experiment's ``memory:`` fields:
    ``--no-gradient-accumulation-fusion`` sets ``gradient_accumulation_fusion: false`` (a
    transient weight gradient per GEMM). The loss flags are the model shape's
    ``cross_entropy_fusion`` (:func:`_loss_fusion`), which sets the loss's time and memory."""
    out: dict[str, Any] = {}
    if switch_on(flags.get("no-gradient-accumulation-fusion")):
        out["gradient_accumulation_fusion"] = False
    return out


def flag_memory_options(flags: dict[str, Any]) -> dict[str, Any]:
    """Every ``memory:`` field the flags alone set (:func:`workspace_options`,
    :func:`loss_options`): what ``sim import`` and the memory benchmark both read."""
    return workspace_options(flags) | loss_options(flags)


def _memory_options(r: Reading, dist: bool) -> dict[str, Any]:
    """``--use-precision-aware-optimizer`` and its dtypes as the experiment's ``memory:``
    fields (:mod:`sim.memory.precision_aware`); unmapped where Megatron-Core would refuse them
    (another optimizer than Adam, no distributed optimizer, a dtype it does not take)."""
    aware = r.switch("use-precision-aware-optimizer")
    out: dict[str, Any] = {"precision_aware_optimizer": True} if aware else {}
    for flag, field_name in OPTIMIZER_DTYPES.items():
        value = str(r.text(flag, "fp32")).removeprefix("torch.")
        if value not in DTYPE_NAMES:
            r.unmapped(flag, f"{value!r}: not a dtype Megatron-Core takes")
        elif DTYPE_NAMES[value] != "fp32":
            out[field_name] = DTYPE_NAMES[value]
    if out and not aware:
        for flag in OPTIMIZER_DTYPES:
            if r.has(flag):
                r.unmapped(flag, "lower-precision optimizer state without "
                           "--use-precision-aware-optimizer (Megatron-Core asserts fp32)")  # fmt: skip
        return {}
    if aware and (not dist or str(r.flags.get("optimizer", "adam")) != "adam"):
        r.unmapped("use-precision-aware-optimizer", "needs Adam and the distributed optimizer "
                   "(megatron/core/optimizer/optimizer_config.py asserts both)")  # fmt: skip
        return {}
    for flag in ("use-precision-aware-optimizer", *OPTIMIZER_DTYPES):
        if r.has(flag) and not any(n.name == flag for n in r.notes):
            r.mapped(flag, "memory: precision-aware optimizer (sim.memory.precision_aware)")
    return out


def _dropout(r: Reading, framework: str) -> bool:
    """Attention or hidden dropout with p > 0: the decoder keeps its masks
    (:attr:`sim.compute.decoder_shape.DecoderShape.dropout`). Megatron-LM's defaults are 0.1
    for both (``megatron/training/arguments.py`` ``--attention-dropout``, ``--hidden-dropout``,
    NVIDIA/Megatron-LM@d98e8a64dd); a Megatron-Bridge run without them is taken to train
    without dropout, as its providers of the Llama-like decoders do (an assumption)."""
    default = 0.1 if framework == "megatron-lm" else 0.0
    on = False
    for flag in ("attention-dropout", "hidden-dropout"):
        try:
            p = float(r.flags.get(flag, default))
        except (TypeError, ValueError):
            p = default
        on = on or p > 0
        r.mapped(flag, "dropout masks kept (DecoderShape.dropout)" if p > 0 else "no dropout")
    return on


def _fused_weighting(r: Reading, framework: str) -> bool:
    """Whether a MoE run's experts multiply the routing probabilities in inside a fused
    activation (:attr:`sim.compute.moe_shape.MoEShape.fused_weighting`). Megatron-LM fuses a gated
    SiLU unless ``--no-bias-swiglu-fusion`` (``bias_activation_fusion`` is
    ``--bias-swiglu-fusion`` with ``--swiglu``, else ``--bias-gelu-fusion``:
    ``megatron/training/arguments.py``) and squared ReLU with
    ``--use-fused-weighted-squared-relu``; a GeLU expert has no fused form (``experts.py``
    raises for it, so its runs pass ``--no-bias-gelu-fusion``). Megatron-Bridge's performance
    recipes set the fusions (``bias_activation_fusion = True``: e.g. NVIDIA-NeMo/
    Megatron-Bridge@067f987df0 ``perf_recipes/qwen/b200/qwen3_moe.py:39``, the DeepSeek,
    Kimi and GPT-OSS bridges; ``use_fused_weighted_squared_relu = True``:
    ``perf_recipes/nemotronh/common.py:120``): fused."""
    if not r.flags.get("num-experts") or framework != "megatron-lm":
        return True
    if r.switch("swiglu"):
        r.mapped("no-bias-swiglu-fusion", "the experts' SiLU and probabilities unfused "
                 "(MoEShape.fused_weighting)")  # fmt: skip
        return not r.switch("no-bias-swiglu-fusion")
    if r.switch("squared-relu"):
        r.mapped("use-fused-weighted-squared-relu", "MoEShape.fused_weighting")
        return r.switch("use-fused-weighted-squared-relu")
    r.mapped("no-bias-gelu-fusion", "a GeLU expert: activation and probabilities unfused "
             "(MoEShape.fused_weighting)")  # fmt: skip
    return False


def _attention(flags: dict[str, Any], framework: str, gpu: str, env: TeEnvironment) -> str:
    """``math`` for Megatron's unfused core attention (``--attention-backend unfused`` or
    ``local``; ``--transformer-impl local`` or Megatron-DeepSpeed without ``--use-flash-attn``;
    TE's own fallback under ``--deterministic-mode`` in ``env``:
    :func:`sim.runs.te_environment.run_attention`), else ``flash`` (a fused kernel)."""
    if framework == "megatron-deepspeed" and "attention-backend" not in flags:
        return "flash" if flags.get("use-flash-attn") else "math"
    return run_attention(flags, gpu, env)


def _world(r: Reading) -> int | None:
    world = r.int("world-size")
    if world:
        r.mapped("world-size", "GPUs in the job")
        return world
    nproc, nodes = r.int("nproc-per-node"), r.int("nnodes", 1) or 1
    for f in ("nproc-per-node", "nnodes"):
        r.mapped(f, "GPUs in the job: nproc-per-node x nnodes")
    return nproc * nodes if nproc else None


A2A_P2P = (
    "hierarchical CP 'a2a+p2p' simulated as the p2p ring over all cp ranks: Transformer "
    "Engine runs an all-to-all inside each group of the first --hierarchical-context-parallel-"
    "sizes (heads split) and the KV ring only across the groups (fewer, larger ring steps; "
    "NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/"
    "context_parallel.py, AttnFuncWithCPAndKVP2P with cp_group_a2a)"
)
"""What the reader changes of an ``a2a+p2p`` run."""


def _layout(r: Reading, world: int | None) -> tuple[ParallelLayout, bool]:
    tp = r.int("tensor-model-parallel-size", 1) or 1
    pp = r.int("pipeline-model-parallel-size", 1) or 1
    cp = r.int("context-parallel-size", 1) or 1
    ep = r.int("expert-model-parallel-size", 1) or 1
    etp = r.int("expert-tensor-parallel-size")
    layers = r.int("num-layers") or r.int("decoder-num-layers") or 0
    vp = r.int("num-virtual-stages-per-pipeline-rank") or 1
    per_vstage = r.int("num-layers-per-virtual-pipeline-stage")
    if per_vstage and layers and pp:
        vp = max(1, layers // (pp * per_vstage))
    vp = _layout_vp(r, pp, vp)
    dp = max(1, world // (tp * pp * cp)) if world else 1
    comm = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather"}
    cp_comm = r.text("cp-comm-type", "p2p") or "p2p"
    if cp > 1 and cp_comm == "a2a+p2p":
        r.done.add("cp-comm-type")
        r.notes.append(ArgNote("cp-comm-type", cp_comm, "approximated", A2A_P2P))
        r.mapped("hierarchical-context-parallel-sizes", "the a2a+p2p split (approximated, "
                 "see cp-comm-type)")  # fmt: skip
        cp_comm = "p2p"
    elif cp > 1 and cp_comm not in comm:
        r.unmapped("cp-comm-type", f"{cp_comm!r}: hierarchical CP exchange (issue 26 item 7)")
    if etp is None and ep > 1 and (dp * cp) % ep:
        etp = _folded_etp(tp, cp, dp, ep)
    fsdp = r.switch("use-megatron-fsdp")
    lay = ParallelLayout(
        pp=pp, vp=vp, dp_replicate=1 if fsdp else dp, dp_shard=dp if fsdp else 1, cp=cp, tp=tp,
        sp=r.switch("sequence-parallel") and tp > 1, ep=ep,
        etp=etp if etp not in (None, tp) else None, cp_comm=comm.get(cp_comm, "p2p"),
    )  # fmt: skip
    if fsdp:
        r.mapped("use-megatron-fsdp", f"layout.dp_shard = dp = {dp} (sim.memory.fsdp)")
        for f in ("data-parallel-sharding-strategy", "megatron-fsdp-main-params-dtype",
                  "megatron-fsdp-main-grads-dtype", "megatron-fsdp-grad-comm-dtype"):  # fmt: skip
            if r.has(f):
                r.mapped(f, "Megatron-FSDP as the megatron-lm profile's fsdp setting")
    for f, what in (
        ("tensor-model-parallel-size", "tp"), ("pipeline-model-parallel-size", "pp"),
        ("context-parallel-size", "cp"), ("expert-model-parallel-size", "ep"),
        ("expert-tensor-parallel-size", "etp"), ("sequence-parallel", "sp"),
        ("num-layers-per-virtual-pipeline-stage", f"vp = layers / (pp x this) = {vp}"),
        ("num-virtual-stages-per-pipeline-rank", "vp"), ("cp-comm-type", "cp_comm"),
    ):  # fmt: skip
        r.mapped(f, f"layout.{what}" if " " not in what else what)
    dist = r.switch("use-distributed-optimizer") or _layer_wise(r)
    r.mapped("use-distributed-optimizer", "memory policy dist_opt (ZeRO-1)")
    return lay, dist


LAYER_WISE = (
    "layer-wise distributed optimizer (--optimizer dist_*): each data-parallel rank keeps the "
    "optimizer state of its share of the parameters, dense ones over dp x cp, expert ones "
    "over the expert data-parallel group, as the distributed optimizer's shards: memory policy "
    "dist_opt (NVIDIA/Megatron-LM@addc601 megatron/core/optimizer/__init__.py lines 746-755: "
    "'dist_muon' is 'muon' with use_layer_wise; layer_wise_optimizer.py LayerWiseDistributed"
    "Optimizer.shard_params, lines 433-462); its gradients are all-reduced and its parameters "
    "all-gathered, timed as the distributed optimizer's reduce-scatter and all-gather"
)
"""What the simulation changes of a layer-wise distributed optimizer run."""


def _layer_wise(r: Reading) -> bool:
    """Whether ``--optimizer`` names a layer-wise distributed optimizer (``dist_muon``:
    :data:`LAYER_WISE`), which shards the state without ``--use-distributed-optimizer``."""
    return str(r.flags.get("optimizer", "")).startswith("dist_")


def _pipeline_layout(r: Reading, lay: ParallelLayout) -> str:
    """The run's pipeline layout (:mod:`sim.runs.pipeline_layout`): ``--pipeline-model-
    parallel-layout``, or Megatron's even split over several virtual stages (the embedding on
    the first, the output layer and loss on the last, or counted as layers with
    ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
    :func:`~sim.runs.pipeline_layout.split_layout`); "" for one stage or layers that do not
    split evenly (Megatron asserts they do)."""
    layout = r.text("pipeline-model-parallel-layout") or pattern_layout(r) or uneven_layout(r, lay)
    r.mapped("pipeline-model-parallel-layout", "options.boundaries (sim.runs.pipeline_layout)")
    flags = ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split")
    emb, loss = (r.switch(f) for f in flags)
    if layout:
        return layout
    if lay.pp * lay.vp == 1:
        for f in flags:
            r.mapped(f, "one stage: the split does not change")
        return ""
    try:
        layout = split_layout(r.int("num-layers") or 0, lay.pp * lay.vp, emb, loss,
                              r.int("mtp-num-layers") or 0)  # fmt: skip
    except ValueError as exc:
        for f in flags:
            if r.has(f):
                r.unmapped(f, str(exc))
        return ""
    for f in flags:
        r.mapped(f, f"options.boundaries of the layout {layout} (sim.runs.pipeline_layout)")
    return layout


def _layout_vp(r: Reading, pp: int, vp: int) -> int:
    """``--pipeline-model-parallel-layout``'s virtual stages per rank: its stages over ``pp``
    (``PipelineParallelLayerLayout.__init__``; :mod:`sim.runs.pipeline_layout`), else ``vp``."""
    text = r.text("pipeline-model-parallel-layout") or pattern_layout(r)
    try:
        n = len(parse_layout(text)) if text else 0
    except ValueError:
        return vp
    return n // pp if n and n % pp == 0 else vp


def _folded_etp(tp: int, cp: int, dp: int, ep: int) -> int | None:
    """The expert tensor-parallel size a run with ``ep`` not dividing ``dp x cp`` must use:
    the largest divisor of ``tp`` with ``ep x etp`` dividing ``tp x cp x dp`` (Megatron-Core's
    ``initialize_model_parallel`` refuses any other; MoE parallel folding), or None."""
    for e in range(tp, 0, -1):
        if tp % e == 0 and (tp * cp * dp) % (ep * e) == 0:
            return e
    return None


def _recompute(r: Reading) -> str:
    gran = r.text("recompute-granularity")
    if r.switch("recompute-activations"):
        gran = "selective"
    method = r.text("recompute-method")
    n = r.int("recompute-num-layers")
    modules = (r.text("recompute-modules") or "core_attn").strip("[]").replace(",", " ").split()
    offloaded = _offloaded_modules(r)
    if offloaded and gran != "selective":
        gran, modules = "selective", []
    modules += offloaded
    out = "none"
    if gran == "full" and method == "block":
        out = f"full:block:{n}" if n else "none"
    elif gran == "full":
        out = "full" if (n or 1) == 1 else f"full:uniform:{n}"
    elif gran == "selective":
        out = "selective" if modules == ["core_attn"] else f"selective:{'+'.join(modules)}"
    for f in ("recompute-granularity", "recompute-method", "recompute-num-layers",
              "recompute-modules", "recompute-activations"):  # fmt: skip
        r.mapped(f, f"recompute {out}")
    return out


def _offloaded_modules(r: Reading) -> list[str]:
    """``["fused_group_mlp"]`` where Megatron's fine-grained activation offloading offloads the
    fused grouped MLP (``--fine-grained-activation-offloading --offload-modules
    fused_group_mlp``): its saved tensors leave the GPU (memory choice ``fused_group_mlp``,
    :mod:`sim.compute.recompute_modules`); other offload modules stay unmodelled (empty)."""
    mods = (r.text("offload-modules") or "").strip("[]").replace(",", " ").split()
    if not r.switch("fine-grained-activation-offloading") or "fused_group_mlp" not in mods:
        return []
    why = (
        "fine-grained activation offloading of fused_group_mlp: the fused grouped MLP's saved "
        "tensors are kept off the GPU (memory choice fused_group_mlp); the copies are not timed"
        + (
            f"; {', '.join(m for m in mods if m != 'fused_group_mlp')} not modelled"
            if len(mods) > 1
            else ""
        )
    )
    for flag in ("fine-grained-activation-offloading", "offload-modules"):
        if flag in r.flags:
            r.done.add(flag)
            r.notes.append(ArgNote(flag, str(r.flags[flag]), "approximated", why))
    return ["fused_group_mlp"]


def _precision(r: Reading) -> str:
    fp8, fp4 = r.text("fp8-format"), r.text("fp4-format")
    base = "bf16" if r.switch("bf16") else "fp16" if r.switch("fp16") else "fp32"
    out = base
    if fp8:
        out = f"fp8-{r.text('fp8-recipe', 'delayed')}"
    if fp4:
        out = r.text("fp4-recipe", "nvfp4") or "nvfp4"
    for f in ("bf16", "fp16", "fp8-format", "fp8-recipe", "fp4-format", "fp4-recipe"):
        r.mapped(f, f"precision {out}")
    return out


def _conditional(r: Reading, lay: ParallelLayout, dist: bool) -> None:
    for flag, (matters, why, harmless) in table.CONDITIONAL.items():
        if flag in r.flags:
            r.done.add(flag)
            if matters(lay, dist):
                r.notes.append(ArgNote(flag, str(r.flags[flag]), "unmapped", why))
            else:
                r.notes.append(ArgNote(flag, str(r.flags[flag]), "ignored", harmless))


def _rest(r: Reading, lay: ParallelLayout) -> None:
    """The flags not read yet: the tables' verdicts, the options read here, the unknown."""
    backend = str(r.flags.get("attention-backend", "auto"))
    opt = str(r.flags.get("optimizer", "adam"))
    disp = str(r.flags.get("moe-token-dispatcher-type", "allgather"))
    special = {
        "attention-backend": ("mapped", "attention core: unfused (s^2 scores in memory)"
                              if backend in ("unfused", "local") else "attention core: fused"),
        "use-flash-attn": ("mapped", "attention core: fused (flash)"),
        "optimizer": ("mapped", f"optimizer {opt}: training.optimizer {OPTIMIZERS[opt]}")
        if opt in ("adam", "sgd") else ("approximated", MUON) if opt == "muon"
        else ("approximated", f"{MUON}; {LAYER_WISE}") if opt == "dist_muon"
        else ("unmapped", f"optimizer {opt!r}: pipesim counts Adam's or SGD's state"),
        "moe-token-dispatcher-type": ("mapped", "token exchange by all-to-all")
        if disp == "alltoall" or lay.ep * lay.tp == 1 else ("mapped", "DeepEP / HybridEP "
        "kernels (framework option moe_token_dispatcher)") if disp == "flex" else ("mapped",
        "all-gather / reduce-scatter dispatcher: routing '+allgather' (sim.parallel.expert)")
        if disp == "allgather" else ("unmapped", f"{disp!r} token dispatcher: not in pipesim"),
    }  # fmt: skip
    for flag, value in r.flags.items():
        if flag in r.done:
            continue
        if flag in special:
            status, reason = special[flag]
        else:
            verdict = table.classify(flag)
            status, reason = verdict or (
                ("unmapped", "not in pipesim's Megatron table (sim/runs/megatron_table.py): "
                 "pass --ignore " + flag + " if it changes neither time nor memory")
                if r.strict else
                ("ignored", "printed in the arguments block; not in pipesim's table (assumed "
                 "not to change time or memory)")
            )  # fmt: skip
        r.notes.append(ArgNote(flag, str(value), status, reason))  # type: ignore[arg-type]
