"""How to rebuild a user's own model in another process: :class:`UserModelSpec` (no torch).

A trace profiled from ``sim profile --model FILE.py:FUNC`` (or a Hugging Face ``config.json``)
stores this spec as ``provenance.model`` with ``kind: user``, so ``sim validate`` can rebuild
the same model on every replay rank: call ``FUNC`` under the same seed, take the same layer
chain (``layers``: module names, fqns) and cut it at the partition's boundaries.

Pure data, no torch import: the CLI and :mod:`sim.validate` check a spec before any process
starts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

KIND = "user"

MOVED_MODULES = {"backends.torch.hf": "backends.torch.models.hf"}
"""Modules of this package that a trace's ``source`` or ``loss`` may name by an older path ->
where they are now (issue 25 moved the backend's modules into rooms; traces profiled before
still name ``backends.torch.hf:build``)."""


def current_ref(ref: str | None) -> str | None:
    """``ref`` (``package.module:FUNC``) with a moved module's old path replaced
    (:data:`MOVED_MODULES`); any other reference as it is.

    Example:
        >>> current_ref("backends.torch.hf:build"), current_ref("model.py:build")
        ('backends.torch.models.hf:build', 'model.py:build')
    """
    if ref is None or ":" not in ref:
        return ref
    head, func = ref.rsplit(":", 1)
    return f"{MOVED_MODULES.get(head, head)}:{func}"


@dataclass(frozen=True)
class UserModelSpec:
    """A user's model as a callable reference plus the layer chain taken from it.

    Attributes:
        source: ``FILE.py:FUNC`` or ``package.module:FUNC``: ``FUNC(**kwargs[,
            microbatch_size=b])`` returns ``(model, sample)`` or ``(model, sample, target)``.
        layers: the chain, as module names inside ``model`` (fqns), input side first.
        loss: ``FILE.py:FUNC`` or ``package.module:FUNC`` computing the loss from the last
            layer's output (and the target, when ``source`` returns one); ``None``: the mean
            of the squared output, a stand-in loss (an assumption, for timing only).
        kwargs: extra keyword arguments for ``source`` (JSON values; the Hugging Face builder
            gets ``config`` and ``seq_len`` here).
        seed: ``torch.manual_seed`` before ``source`` is called, so every rank builds the same
            weights.
        takes_microbatch_size: ``source`` accepts ``microbatch_size=`` (otherwise another
            size repeats and cuts its sample: ``backends.torch.models.user.resize_batch``).
        microbatch_size: samples in the micro-batch the trace was profiled with.
        resolved: absolute path of ``FILE.py`` when ``source`` names a file (tried when the
            path as given does not exist from the working directory).
        name: model name for traces and results.
    """

    source: str
    layers: tuple[str, ...] = ()
    loss: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    takes_microbatch_size: bool = False
    microbatch_size: int = 1
    resolved: str | None = None
    loss_resolved: str | None = None
    name: str = "model"

    def to_dict(self) -> dict[str, Any]:
        """JSON/YAML-friendly dict with ``kind: user`` (what ``provenance.model`` holds)."""
        d = asdict(self)
        d["layers"] = list(self.layers)
        return {"kind": KIND, **d}

    @classmethod
    def draft(
        cls,
        source: str,
        *,
        loss: str | None = None,
        seed: int = 0,
        kwargs: dict[str, Any] | None = None,
        name: str = "model",
    ) -> UserModelSpec:
        """The spec of ``source`` before its model is built: no layer chain yet, its files
        resolved from the working directory (:func:`absolute_file`)."""
        return cls(
            source=source,
            loss=loss,
            seed=seed,
            kwargs=dict(kwargs or {}),
            name=name,
            resolved=absolute_file(source),
            loss_resolved=absolute_file(loss),
        )

    def with_chain(
        self, layers: tuple[str, ...], takes_microbatch_size: bool, microbatch_size: int
    ) -> UserModelSpec:
        """This spec with the layer chain taken from the built model and how the model takes
        its micro-batch size."""
        return replace(
            self,
            layers=tuple(layers),
            takes_microbatch_size=takes_microbatch_size,
            microbatch_size=microbatch_size,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UserModelSpec:
        """Read :meth:`to_dict`'s output back.

        Raises:
            ValueError: unknown keys, or ``kind`` is not ``user``.
        """
        data = dict(data)
        if data.pop("kind", KIND) != KIND:
            raise ValueError("not a user model spec (kind must be 'user')")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown user model fields {unknown}; known: {sorted(names)}")
        data["layers"] = tuple(data.get("layers") or ())
        data["kwargs"] = dict(data.get("kwargs") or {})
        for key in ("source", "loss"):
            if key in data:
                data[key] = current_ref(data[key])
        return cls(**data)


def is_user_model(model: Any) -> bool:
    """True when ``model`` (a replay job's or a provenance's model dict) is a user model."""
    return isinstance(model, dict) and model.get("kind") == KIND


def file_of(ref: str) -> str | None:
    """The file part of ``FILE.py:FUNC`` (``None`` for ``package.module:FUNC``)."""
    head = ref.rsplit(":", 1)[0]
    return head if head.endswith(".py") or "/" in head or "\\" in head else None


def absolute_file(ref: str | None) -> str | None:
    """The absolute path of ``FILE.py`` in ``FILE.py:FUNC`` (from the working directory), for
    :attr:`UserModelSpec.resolved`; ``None`` for ``package.module:FUNC`` or no reference."""
    head = file_of(ref) if ref else None
    return str(Path(head).resolve()) if head else None
