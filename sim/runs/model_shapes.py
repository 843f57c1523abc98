"""Published model shapes the measured tables name but do not give, as Megatron-LM flags.

Megatron-Bridge's performance tables name a model (``Nemotron_3_Super``) and leave its shape
columns empty when the model is built from its Hugging Face config (``AutoBridge``). A row
whose shape columns are empty takes the flags of :data:`SHAPES` by its model name, each entry
with the file (repository@commit:path) its numbers are read from, so that the same table
(:mod:`sim.runs.megatron_table`) judges them. Nothing here is downloaded at run time.

Sources:

* Nemotron 3 Nano (30B-A3B): Megatron-Bridge's ``HybridModelProvider`` arguments,
  NVIDIA-NeMo/Megatron-Bridge@067f987df0 ``src/megatron/bridge/recipes/nemotronh/h100/
  nemotron_3_nano.py`` lines 78-120 (as ``examples/hf/nemotron-3-nano-30b-a3b-config.json``:
  ``vocab_size`` 131072, ``chunk_size`` 128, ``mlp_hidden_act`` relu2);
* Nemotron 3.5 Lightning: the same provider (the performance recipe builds it from
  ``nemotron_3_nano_pretrain_8gpu_h100_bf16_config``: ``perf_recipes/nemotronh/gb200/
  nemotronh.py`` ``_build_nemotron_3_5_lightning_gb200_mxfp8``, lines 505-518, adding two MTP
  depths of pattern ``*E``, which the recipe table's ``mtp_num_layers`` carries);
* Nemotron 3 Super (120B-A12B): Megatron-LM's release test of the model, NVIDIA/Megatron-LM@
  d98e8a64 ``tests/functional_tests/test_cases/nemotron/nemotron3_super_release_gb200/
  model_config.yaml`` (Megatron's Mamba defaults for the sizes it does not pass: head width 64,
  8 groups, state 128); cross-checked with Megatron-Bridge's unit test
  ``tests/unit_tests/recipes/nemotronh/test_nemotron_3_super.py`` lines 350-354 (expert width
  2688, shared 5376, latent 1024);
* Nemotron 3 Ultra (550B-A55B): Megatron-LM's ModelOpt arguments of the model,
  NVIDIA/Megatron-LM@d98e8a64 ``examples/post_training/modelopt/conf/nvidia/
  NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh`` (its Super file there gives the Super shape
  above exactly: the same pattern, sizes and latent width); Megatron's Mamba defaults for the
  state (128) and groups (8); the routed experts' width is the ``--ffn-hidden-size`` (no
  ``--moe-ffn-hidden-size``: ``megatron/training/arguments.py`` lines 1650-1651);
* vocabulary: Megatron-Bridge sizes it from the tokenizer (``use_tokenizer_vocab_size`` False
  and no model vocabulary: ``src/megatron/bridge/training/setup.py`` lines 744-766), the
  Nemotron 3 tokenizer's 131,072 tokens (``NVIDIA-Nemotron-3-Nano-30B-A3B-BF16``, which the Super
  recipe uses too: ``recipes/nemotronh/nemotron_3_super.py:56``). Ultra's recipe uses its own
  checkpoint's tokenizer (``recipes/nemotronh/h100/nemotron_3_ultra.py:67``), whose size no
  source the project reads gives: 131,072 is an assumption there (:data:`ASSUMED`, shown with
  its rows);
* router expert bias (``--moe-router-enable-expert-bias``, :mod:`sim.parallel.router_bias`):
  every Nemotron 3 provider sets it, the Nano recipe's ``HybridModelProvider`` (@067f987df0
  ``recipes/nemotronh/h100/nemotron_3_nano.py`` line 111) and the Hugging Face bridge that
  builds Super and Ultra (``AutoBridge``: ``models/nemotronh/nemotron_h_bridge.py`` line 312).
"""

from __future__ import annotations

from typing import Any

NEMOTRON_VOCAB = 131072
"""The Nemotron 3 tokenizer's vocabulary (module doc)."""
_NANO: dict[str, Any] = {
    "hybrid-layer-pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num-layers": 52, "hidden-size": 2688, "num-attention-heads": 32,
    "group-query-attention": True, "num-query-groups": 2, "kv-channels": 128,
    "ffn-hidden-size": 1856, "mamba-num-heads": 64, "mamba-head-dim": 64, "mamba-state-dim": 128,
    "mamba-num-groups": 8, "num-experts": 128, "moe-ffn-hidden-size": 1856,
    "moe-shared-expert-intermediate-size": 3712, "moe-router-topk": 6,
    "vocab-size": NEMOTRON_VOCAB, "squared-relu": True, "position-embedding-type": "none",
    "normalization": "RMSNorm", "untie-embeddings-and-output-weights": True,
    "is-hybrid-model": True, "moe-router-enable-expert-bias": True,
}  # fmt: skip
_SUPER: dict[str, Any] = {
    "hybrid-layer-pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
    "EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
    "num-layers": 88, "hidden-size": 4096, "num-attention-heads": 32,
    "group-query-attention": True, "num-query-groups": 2, "kv-channels": 128,
    "ffn-hidden-size": 2688, "mamba-num-heads": 128, "num-experts": 512,
    "moe-ffn-hidden-size": 2688, "moe-shared-expert-intermediate-size": 5376,
    "moe-router-topk": 22, "moe-latent-size": 1024, "vocab-size": NEMOTRON_VOCAB,
    "squared-relu": True, "position-embedding-type": "none", "normalization": "RMSNorm",
    "untie-embeddings-and-output-weights": True, "is-hybrid-model": True,
    "moe-router-enable-expert-bias": True,
}  # fmt: skip
_ULTRA: dict[str, Any] = {
    "hybrid-layer-pattern": "MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*"
    "EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num-layers": 108, "hidden-size": 8192, "num-attention-heads": 64,
    "group-query-attention": True, "num-query-groups": 2, "kv-channels": 128,
    "ffn-hidden-size": 5120, "mamba-num-heads": 256, "mamba-head-dim": 64, "num-experts": 512,
    "moe-ffn-hidden-size": 5120, "moe-shared-expert-intermediate-size": 10240,
    "moe-router-topk": 22, "moe-latent-size": 2048, "vocab-size": NEMOTRON_VOCAB,
    "squared-relu": True, "position-embedding-type": "none", "normalization": "RMSNorm",
    "untie-embeddings-and-output-weights": True, "is-hybrid-model": True,
    "moe-router-enable-expert-bias": True,
}  # fmt: skip
SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("nemotron_3_5_lightning", _NANO),
    ("nemotron_3_nano", _NANO),
    ("nemotron_3_super", _SUPER),
    ("nemotron_3_ultra", _ULTRA),
)
"""A (lower-case) part of the model name -> its flags (module doc), first match."""


ASSUMED: tuple[tuple[str, str], ...] = (
    ("nemotron_3_ultra", "assumption: Nemotron 3 Ultra's vocabulary taken as the Nemotron 3 "
     "tokenizer's 131,072 tokens (its recipe reads its own checkpoint's tokenizer, whose size "
     "no source gives: sim.runs.model_shapes)"),
)  # fmt: skip
"""A (lower-case) part of the model name -> what its entry assumes (module doc)."""


def shape_assumptions(model: str) -> tuple[str, ...]:
    """What the published-shape entry of ``model`` assumes, as ``assumption:`` entries.

    Example:
        >>> len(shape_assumptions("Nemotron_3_Ultra")), shape_assumptions("Nemotron_3_Super")
        (1, ())
    """
    name = model.lower()
    return tuple(note for part, note in ASSUMED if part in name)


def shape_flags(model: str) -> dict[str, Any] | None:
    """The flags of a named model's published shape (module doc), or None.

    Example:
        >>> shape_flags("Nemotron_3_Super")["moe-latent-size"], shape_flags("Llama3") is None
        (1024, True)
    """
    name = model.lower()
    return next((dict(flags) for part, flags in SHAPES if part in name), None)
