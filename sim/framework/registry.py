"""Framework registry: ``framework:`` name -> :class:`~sim.framework.base.Framework` profile."""

from __future__ import annotations

from sim.framework.base import Framework
from sim.framework.deepspeed import DeepSpeed
from sim.framework.megatron_deepspeed import MegatronDeepSpeed
from sim.framework.megatron_lm import MegatronLM
from sim.framework.megatron_lm_torch_ddp import MegatronLMTorchDDP
from sim.framework.pipesim import Pipesim
from sim.framework.pytorch_ddp import PytorchDDP
from sim.framework.torchtitan import Torchtitan

DEFAULT_FRAMEWORK = Pipesim.name
"""What an experiment without ``framework:`` runs: what ``sim validate`` replays."""

FRAMEWORKS: dict[str, Framework] = {
    cls.name: cls()
    for cls in (
        Pipesim,
        MegatronDeepSpeed,
        MegatronLM,
        MegatronLMTorchDDP,
        DeepSpeed,
        Torchtitan,
        PytorchDDP,
    )
}
"""Every profile by name, the default first."""


class UnknownFrameworkError(KeyError):
    """An unknown framework name; ``str()`` is the plain message listing the valid ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def framework_names() -> list[str]:
    """The profile names, the default first."""
    return list(FRAMEWORKS)


def get_framework(name: str) -> Framework:
    """The profile registered under ``name``.

    Raises:
        UnknownFrameworkError: a :class:`KeyError` whose message lists the valid names.

    Example:
        >>> get_framework("megatron-deepspeed").placement.value
        'megatron'
    """
    try:
        return FRAMEWORKS[name]
    except (KeyError, TypeError):
        raise UnknownFrameworkError(
            f"unknown framework {name!r}; valid: {', '.join(framework_names())}"
        ) from None
