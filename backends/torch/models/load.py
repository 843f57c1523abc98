"""The :class:`~backends.torch.models.replay_model.ReplayModel` a replay job names."""

from __future__ import annotations

from typing import Any

from backends.torch.models.replay_model import ReplayModel, TransformerModel
from backends.torch.models.user_spec import is_user_model
from backends.torch.models.user_stage import UserModel


def load_model(job: Any) -> ReplayModel:
    """The model of a :class:`backends.torch.replay.job.ReplayJob` (its ``model``,
    ``microbatch_size``, ``seed`` and ``dtype``): a user's model (``kind: user``) or GPT/BERT.

    Raises:
        sim.errors.InputError: a user's model that can no longer be built.
        ValueError: a GPT/BERT spec with unknown or invalid fields.
    """
    if is_user_model(job.model):
        return UserModel(job.model, job.microbatch_size, job.dtype)
    return TransformerModel(job.model, job.microbatch_size, job.seed, job.dtype)
