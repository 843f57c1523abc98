"""The T5 branch of :func:`sim.runs.express.express`: a Megatron-LM T5 run's shape and why
it cannot be simulated (:mod:`sim.trace.t5`).

A T5 run (``pretrain_t5.py``; the readers' ``arch`` ``t5``) gives its sizes as Megatron flags,
which the readers keep as argument notes (:class:`~sim.runs.record.ArgNote`): encoder and
decoder layers and sequence lengths, the position table, ``--kv-channels``. Its vocabulary is
the tokenizer's plus Megatron-Core's sentinels (:func:`t5_vocab`). Refused, each with its
reason: untied embeddings, positions other than learned absolute ones (Megatron-Core's
``rope`` and ``relative`` options), a gated or non-GeLU MLP or RMSNorm, pipeline parallelism
(which Megatron-LM refuses for T5), context and expert parallelism, a tensor-parallel size that
does not divide the heads and FFN width.
"""

from __future__ import annotations

from sim.compute.t5 import T5Shape, check_tp
from sim.runs.megatron_shape import TOKENIZER_VOCAB, VOCAB_DIVISIBLE_BY
from sim.runs.record import MeasuredRun, ModelShape


def _feature(s: ModelShape, name: str) -> str | None:
    return next((f.split("=", 1)[1] for f in s.features if f.startswith(name + "=")), None)


T5_ARGS = ("encoder-num-layers", "decoder-num-layers", "encoder-seq-length", "decoder-seq-length")
"""Megatron-LM flags a T5 run must give (``pretrain_t5.py``)."""
T5_SIZED = ("max-position-embeddings",)
"""Flags the readers call approximated (for the GPT generator) that the T5 generator honours."""
T5_NOTES = (
    "T5 host ops per layer: an assumption, Megatron-DeepSpeed's GPT block counts with a "
    "cross-attention added (sim.compute.t5_ops)",
)
"""What a T5 run is simulated with that is not read from its code (listed with the run's
approximations)."""
T5_EXTRA_IDS = 100
"""Sentinel tokens ``<extra_id_i>`` Megatron-Core adds to the ``BertWordPieceCase``
vocabulary for T5 (NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/tokenizers/utils/
build_tokenizer.py:41-44``: 100 ``additional_special_tokens``, whatever ``--vocab-extra-ids``
says)."""


def _arg(run: MeasuredRun, flag: str) -> int | None:
    value = next((a.value for a in run.args if a.name.lstrip("-") == flag), None)
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def t5_vocab(run: MeasuredRun) -> int | None:
    """A T5 run's padded vocabulary: the reader's, or for ``BertWordPieceCase`` its 28,996
    tokens and the :data:`T5_EXTRA_IDS` sentinels padded to a multiple of ``128 t``
    (Megatron's ``--make-vocab-size-divisible-by`` default)."""
    tok = next((a.value for a in run.args if a.name.lstrip("-") == "tokenizer-type"), "")
    if tok != "BertWordPieceCase" or _arg(run, "vocab-size") or _arg(run, "padded-vocab-size"):
        return run.shape.vocab
    mult = (_arg(run, "make-vocab-size-divisible-by") or VOCAB_DIVISIBLE_BY) * run.layout.tp
    return -(-(TOKENIZER_VOCAB[tok] + T5_EXTRA_IDS) // mult) * mult


def t5_shape(run: MeasuredRun) -> T5Shape:
    """The :class:`~sim.compute.t5.T5Shape` of a T5 run (its Megatron flags, read from the
    run's argument notes).

    Raises:
        ValueError: a missing or invalid size.
    """
    s = run.shape
    sizes = {f: _arg(run, f) for f in T5_ARGS}
    if None in sizes.values() or not (s.hidden and s.heads and s.ffn_hidden):
        missing = [f for f, v in sizes.items() if v is None]
        raise ValueError(f"T5 shape incomplete ({', '.join(missing) or 'hidden, heads, FFN'})")
    kv = _arg(run, "kv-channels")
    return T5Shape(
        encoder_layers=sizes["encoder-num-layers"] or 0,
        decoder_layers=sizes["decoder-num-layers"] or 0,
        hidden=s.hidden, heads=s.heads, ffn_hidden=s.ffn_hidden,
        encoder_seq=sizes["encoder-seq-length"] or 0,
        decoder_seq=sizes["decoder-seq-length"] or 0, vocab=t5_vocab(run) or 0,
        max_positions=_arg(run, "max-position-embeddings"),
        head_dim=kv if kv and kv * s.heads != s.hidden else None, attention=run.attention,
    )  # fmt: skip


def t5_reasons(run: MeasuredRun) -> list[str]:
    """Why a T5 run cannot be simulated (empty: it can; :mod:`sim.trace.t5`)."""
    s, lay, out = run.shape, run.layout, []
    try:
        m = t5_shape(run)
    except ValueError as exc:
        return [f"model shape: {exc}"]
    if not s.tied_embeddings:
        out.append("T5 with untied embeddings (the T5 generator ties them, as Megatron's default)")
    if _feature(s, "position") != "learned_absolute":
        out.append(f"T5 with {_feature(s, 'position')} positions (the T5 generator has "
                   "learned absolute positions, Megatron-Core's default)")  # fmt: skip
    if s.gated_mlp or _feature(s, "activation") or _feature(s, "norm") != "LayerNorm":
        out.append("T5 with a gated or non-GeLU MLP or RMSNorm (the T5 generator: GeLU, LayerNorm)")
    if lay.pp > 1:
        out.append("T5 with pipeline parallelism: Megatron-LM refuses it (NVIDIA/Megatron-LM@"
                   "d98e8a64dd examples/t5/pretrain_t5.py:97-98)")  # fmt: skip
    if lay.cp > 1 or lay.ep > 1:
        out.append("T5 with context or expert parallelism (the T5 generator: tensor and data "
                   "parallelism)")  # fmt: skip
    why = check_tp(m, lay.tp, lay.sp)
    return out + ([f"T5: {why}"] if why else [])
