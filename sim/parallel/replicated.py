"""Which parameters of a GPT or BERT layer Megatron splits over ``t`` tensor ranks, and which
every rank keeps whole.

Megatron splits the weight matrices of its parallel linear layers and the word embedding over
the tensor-parallel ranks; everything else is a full copy on every rank, so its gradient is
part of each rank's data-parallel reduction and its weights, gradients and optimizer state are
in each rank's memory:

* **embedding**: the word embedding is ``VocabParallelEmbedding`` (``V/t x h`` per rank); the
  learned position embedding is a plain ``torch.nn.Embedding(max_sequence_length, h)``
  ("Position embedding (serial)"), whole on every rank, as are BERT's token-type embedding
  and its LayerNorm. Sources: NVIDIA/Megatron-LM@de7dc40f (the commit that added
  ``examples/sc21/run_table_1.sh``) ``megatron/model/language_model.py`` l.133-142;
  microsoft/Megatron-DeepSpeed@4822c87e (2023-09) ``megatron/model/language_model.py``
  l.157-178 (``torch.nn.Embedding`` unless ``--no-position-embedding`` or sequence
  parallelism); vTrain's own model (VIA-Research/vTrain@f8dda84 ``src/model/gpt_modeling.py``
  l.62-63: ``vocab_size // world_size`` word rows, ``max_sequence_length`` position rows).
  The table has ``max_position_embeddings`` rows; pipesim's GPT/BERT traces count ``s``
  (:mod:`sim.trace.generator`): an assumption that the runs set it to the sequence length,
  as Megatron's GPT examples and vTrain's configs (``max_length``) do.
* **block**: the QKV and first MLP projections are ``ColumnParallelLinear`` (weight and bias
  split), the attention output and second MLP projections ``RowParallelLinear`` (weight
  split, bias whole: ``self.bias = Parameter(torch.empty(self.output_size))``,
  NVIDIA/Megatron-LM@de7dc40f ``megatron/mpu/layers.py`` l.359-366); the two LayerNorms are
  whole (``megatron/model/transformer.py`` l.405, 420). Split: ``(4 + 2f)h^2 + (3 + f)h``;
  whole: ``6h`` (two LayerNorms ``4h``, two row-parallel biases ``2h``).
* **head**: the output projection uses the (split) word embedding ``V/t x h`` (and BERT's
  output bias ``V/t``, ``mpu_vocab_size``); the final LayerNorm, BERT's MLM transform, pooler
  and NSP classifier are whole.
"""

from __future__ import annotations


def split_params(kind: str, model: str, hidden: int, vocab: int, ffn_mult: int = 4) -> int:
    """Parameters of one ``kind`` layer (``embedding``, ``block``, ``head``) of a ``model``
    (``gpt``/``bert``) stack of hidden size ``hidden``, vocabulary ``vocab`` and FFN multiplier
    ``ffn_mult`` that Megatron splits over the tensor ranks (module doc); the rest of the
    layer's parameters are whole on every rank. Another kind: 0 (nothing split).

    Example (h = 4, V = 10, f = 4: a block splits 12 h^2 + 7h = 220 of its 12h^2 + 13h = 244):
        >>> [split_params(k, "gpt", 4, 10) for k in ("embedding", "block", "head")]
        [40, 220, 40]
        >>> split_params("head", "bert", 4, 10)
        50
    """
    h, f, v = hidden, ffn_mult, vocab
    if kind == "embedding":
        return v * h
    if kind == "block":
        return (4 + 2 * f) * h * h + (3 + f) * h
    if kind == "head":
        return v * h + (v if model == "bert" else 0)
    return 0


def rank_param_bytes(param_bytes: float, split_bytes: float, t: int) -> float:
    """Bytes of a layer's parameters on one of ``t`` tensor ranks: its ``split_bytes`` over
    ``t`` plus the rest whole (module doc). A layer that counts fewer bytes than
    ``split_bytes`` (a trace without the whole parts) is split whole: ``param_bytes / t``.

    Example (the position embedding of GPT h = 2048, s = 1024 at t = 8 stays whole):
        >>> word, pos = 51200 * 2048 * 2, 1024 * 2048 * 2
        >>> rank_param_bytes(word + pos, word, 8) == word / 8 + pos
        True
    """
    if split_bytes > param_bytes:
        return param_bytes / t
    return split_bytes / t + (param_bytes - split_bytes)
