"""Real transformer models for profiling and replay, as an ordered chain of layers.

A model is the chain ``[embedding, block_0, ..., block_{L-1}, head]`` (``L + 2`` layers), the
same chain the analytic generator (``sim.trace.generator``) describes, so a partition computed
on a trace (``boundaries``: start layer of each stage) cuts this model at the same places.

* ``gpt``: causal decoder. Token + learned position embedding; pre-norm blocks
  (``nn.TransformerEncoderLayer(norm_first=True)`` with a causal mask); head = final LayerNorm +
  a bias-free linear LM head (untied, so stages stay independent).
* ``bert``: encoder. Token + position embedding + LayerNorm; post-norm blocks; head = BERT's MLM
  transform (Linear, GELU, LayerNorm) + decoder Linear, predicting every position (no pooler or
  NSP classifier, which the analytic generator counts).

Parameter counts match ``sim.trace.generator``: a block has ``(4 + 2f)h^2 + (9 + f)h``; the GPT
embedding ``(V + s)h`` and head ``2h + Vh`` (the generator's head copy of the word embedding is
our untied LM head).

Dropout is 0 so runs are deterministic. Each layer is initialised from its own seed
(``seed * 100003 + layer index``) under :func:`torch.random.fork_rng`, so a stage built alone
(:func:`build_stage`) has exactly the weights of the same layers in the full model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from sim.trace.generator import MODEL_PRESETS

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ModelSpec:
    """Size of a transformer, with the analytic generator's parameters.

    Attributes:
        name: model name written into traces and results.
        kind: ``gpt`` (causal decoder) or ``bert`` (encoder).
        layers: transformer blocks ``L`` (the chain has ``L + 2`` layers).
        hidden: hidden size ``h``.
        heads: attention heads (must divide ``hidden``).
        seq_len: tokens per sample ``s``.
        vocab: vocabulary size ``V``.
        ffn_mult: MLP width as a multiple of ``hidden`` (4 in GPT/BERT).
    """

    name: str = "tiny-gpt"
    kind: str = "gpt"
    layers: int = 2
    hidden: int = 32
    heads: int = 2
    seq_len: int = 16
    vocab: int = 64
    ffn_mult: int = 4

    def __post_init__(self) -> None:
        if self.kind not in ("gpt", "bert"):
            raise ValueError(f"model kind must be 'gpt' or 'bert', got {self.kind!r}")
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "ffn_mult"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model {name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")

    @property
    def n_layers(self) -> int:
        """Length of the layer chain: embedding + blocks + head."""
        return self.layers + 2

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (round-trips through :func:`as_spec`)."""
        return asdict(self)


def as_spec(model: ModelSpec | Mapping[str, Any] | str | Any) -> ModelSpec:
    """A :class:`ModelSpec` from a spec, a dict, a ``sim.trace.model_presets.MODEL_PRESETS`` name,
    or any object with the same attributes.

    Unknown dict keys raise (unless their value is ``None``), so typos are caught.

    Raises:
        ValueError: a missing/unknown field or an invalid size.
    """
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        if model not in MODEL_PRESETS:
            raise ValueError(f"unknown model preset {model!r}; known: {sorted(MODEL_PRESETS)}")
        return ModelSpec(name=model, **MODEL_PRESETS[model])  # type: ignore[arg-type]
    names = [f.name for f in fields(ModelSpec)]
    if isinstance(model, Mapping):
        unknown = sorted(k for k in model if k not in names and model[k] is not None)
        if unknown:
            raise ValueError(f"unknown model fields {unknown}; known: {names}")
        return ModelSpec(**{k: v for k, v in model.items() if k in names})
    return ModelSpec(**{k: getattr(model, k) for k in names if hasattr(model, k)})


class Embedding(nn.Module):
    """Token + learned position embedding (+ LayerNorm for BERT). ``[b, s]`` ids -> ``[b, s, h]``."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.tok = nn.Embedding(spec.vocab, spec.hidden)
        self.pos = nn.Embedding(spec.seq_len, spec.hidden)
        self.norm = nn.LayerNorm(spec.hidden) if spec.kind == "bert" else nn.Identity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.tok(ids) + self.pos(pos))


class Block(nn.Module):
    """One transformer block, ``nn.TransformerEncoderLayer`` (causal and pre-norm for GPT)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.causal = spec.kind == "gpt"
        self.layer = nn.TransformerEncoderLayer(
            spec.hidden,
            spec.heads,
            dim_feedforward=spec.ffn_mult * spec.hidden,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=self.causal,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.causal:
            return self.layer(x)
        mask = nn.Transformer.generate_square_subsequent_mask(
            x.shape[1], device=x.device, dtype=x.dtype
        )
        return self.layer(x, src_mask=mask, is_causal=True)


class Head(nn.Module):
    """Output head: ``[b, s, h]`` -> logits ``[b, s, V]`` (loss in :func:`lm_loss`)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.kind == "gpt":
            self.transform: nn.Module = nn.LayerNorm(spec.hidden)
        else:
            self.transform = nn.Sequential(
                nn.Linear(spec.hidden, spec.hidden), nn.GELU(), nn.LayerNorm(spec.hidden)
            )
        self.out = nn.Linear(spec.hidden, spec.vocab, bias=spec.kind == "bert")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.transform(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of ``logits [b, s, V]`` against ``targets [b, s]`` (fp32)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _layer(spec: ModelSpec, index: int) -> nn.Module:
    if index == 0:
        return Embedding(spec)
    if index == spec.n_layers - 1:
        return Head(spec)
    return Block(spec)


def layer_names(spec: ModelSpec) -> list[str]:
    """Names of the chain, as the analytic generator's: ``embedding``, ``block.0`` ..., ``head``."""
    return ["embedding", *(f"block.{i}" for i in range(spec.layers)), "head"]


def build_layers(
    spec: ModelSpec | Mapping[str, Any],
    seed: int = 0,
    indices: Sequence[int] | None = None,
    dtype: str = "fp32",
) -> list[nn.Module]:
    """The model's layers in chain order, deterministically initialised.

    Args:
        spec: model size.
        seed: base seed; layer ``i`` is initialised from ``seed * 100003 + i``.
        indices: build only these chain indices (default: all ``L + 2``).
        dtype: ``fp32``, ``fp16`` or ``bf16`` (parameters are cast after an fp32 init).

    Returns:
        Modules on CPU, in training mode.
    """
    spec = as_spec(spec)
    out = []
    for i in range(spec.n_layers) if indices is None else indices:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 100003 + i)
            out.append(_layer(spec, i).to(DTYPES[dtype]).train())
    return out


def stage_ranges(boundaries: Sequence[int], n_layers: int) -> list[range]:
    """Layer index ranges of each stage from ``boundaries``.

    Args:
        boundaries: start layer of each stage (``[0, 3, 5]``, as
            ``sim.parallel.partition.Partition``); a trailing ``n_layers`` (``[0, 3, 5, 8]``) is
            accepted too.
        n_layers: length of the chain.

    Raises:
        ValueError: not starting at 0, not strictly increasing, or past the chain.
    """
    b = list(boundaries)
    if len(b) > 1 and b[-1] == n_layers:
        b = b[:-1]
    if (
        not b
        or b[0] != 0
        or any(x >= y for x, y in zip(b, b[1:], strict=False))
        or b[-1] >= n_layers
    ):
        raise ValueError(
            f"boundaries {list(boundaries)} must start at 0 and rise strictly below {n_layers}"
        )
    ends = [*b[1:], n_layers]
    return [range(a, e) for a, e in zip(b, ends, strict=True)]


class StageModule(nn.Module):
    """The layers of one stage, run in order; optionally recomputing every block.

    Args:
        layers: the stage's modules (chain order).
        first: chain index of ``layers[0]`` (used to name parameters globally).
        recompute: wrap each :class:`Block` in ``torch.utils.checkpoint.checkpoint``
            (non-reentrant), i.e. the ``recompute`` memory policy (memory.md §7); or only the
            blocks at these positions in the stage (``recompute:full:N``).
    """

    def __init__(
        self,
        layers: Sequence[nn.Module],
        first: int = 0,
        recompute: bool | Collection[int] = False,
    ):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.first = first
        self.recompute = (
            frozenset(range(len(layers))) if recompute is True else frozenset(recompute or ())
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if i in self.recompute and isinstance(layer, Block):
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x

    def global_named_parameters(self) -> dict[str, torch.Tensor]:
        """Parameters named ``"<chain index>.<name>"``, as in ``nn.Sequential(*build_layers())``."""
        out: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            for name, p in layer.named_parameters():
                out[f"{self.first + i}.{name}"] = p
        return out


def build_stage(
    spec: ModelSpec | Mapping[str, Any],
    boundaries: Sequence[int],
    stage: int,
    seed: int = 0,
    *,
    recompute: bool | Collection[int] = False,
    dtype: str = "fp32",
) -> StageModule:
    """The layers of ``stage`` as one module, weights identical to :func:`build_layers`.

    Args:
        spec: model size.
        boundaries: start layer of each stage (see :func:`stage_ranges`).
        stage: stage index.
        seed: the model seed.
        recompute: activation checkpointing around each block (or the blocks at these
            positions in the stage).
        dtype: parameter dtype.
    """
    spec = as_spec(spec)
    rng = stage_ranges(boundaries, spec.n_layers)[stage]
    layers = build_layers(spec, seed, rng, dtype)
    return StageModule(layers, rng.start, recompute)


def make_batch(
    spec: ModelSpec | Mapping[str, Any], microbatch_size: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random micro-batch: token ids and targets, both ``int64 [b, s]`` on CPU.

    GPT targets are the ids shifted left by one (next-token prediction, random last token);
    BERT targets are independent random ids (every position predicted).
    """
    spec = as_spec(spec)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, spec.vocab, (microbatch_size, spec.seq_len + 1), generator=g)
    if spec.kind == "gpt":
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    targets = torch.randint(0, spec.vocab, (microbatch_size, spec.seq_len), generator=g)
    return ids[:, :-1].contiguous(), targets


def microbatch(
    spec: ModelSpec, microbatch_size: int, seed: int, index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global micro-batch ``index`` of a run with ``seed``: ``make_batch`` with a derived seed."""
    return make_batch(spec, microbatch_size, seed * 1000003 + index)
