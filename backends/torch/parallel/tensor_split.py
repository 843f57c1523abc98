"""Whether a GPT can be split ``t`` ways by the tensor-parallel replay, without torch.

Torch-free, so that the CLI can refuse ``sim profile --tensor-parallel`` before anything is
measured (tests/test_no_torch.py) with the same rule :mod:`backends.torch.parallel.tensor`
applies when it splits the model: Megatron's column/row split needs ``t`` to divide the
heads and the FFN width, the vocabulary-parallel embedding and loss the vocabulary, and
sequence parallelism the sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def tp_problem(spec: Mapping[str, Any] | Any, t: int, sequence_parallel: bool) -> str:
    """Why the model cannot be split ``t`` ways here, or ``""``.

    Args:
        spec: a :class:`backends.torch.models.transformer.ModelSpec`, or a mapping with its
            ``kind``, ``heads``, ``hidden``, ``vocab``, ``seq_len`` and optionally ``ffn_mult`` (4).
        t: tensor-parallel ranks.
        sequence_parallel: whether LayerNorms and residuals are split over the sequence too.
    """

    def get(name: str, default: Any = None) -> Any:
        if isinstance(spec, Mapping):
            return spec.get(name, default)
        return getattr(spec, name, default)

    if get("kind") != "gpt":
        return f"the tensor-parallel replay runs GPT models, not {get('kind')!r}"
    for name, n in (
        ("heads", int(get("heads"))),
        ("FFN width", int(get("ffn_mult", 4)) * int(get("hidden"))),
        ("vocab", int(get("vocab"))),
    ):
        if n % t:
            return f"tensor_parallel {t} must divide the model's {name} ({n})"
    if sequence_parallel and int(get("seq_len")) % t:
        return f"sequence parallelism needs seq_len {get('seq_len')} divisible by {t}"
    return ""
