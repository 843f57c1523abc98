"""Framework registry: ``framework:`` name -> :class:`~sim.framework.base.Framework` profile.

The shared plug-in shape (:class:`sim.plugins.Registry`): one class per framework, one list
here. A profile carries no state per point, so each class has one shared instance.
"""

from __future__ import annotations

from sim.framework.base import Framework
from sim.framework.deepspeed import DeepSpeed
from sim.framework.megatron_deepspeed import MegatronDeepSpeed
from sim.framework.megatron_lm import MegatronLM
from sim.framework.megatron_lm_torch_ddp import MegatronLMTorchDDP
from sim.framework.pipesim import Pipesim
from sim.framework.pytorch_ddp import PytorchDDP
from sim.framework.torchtitan import Torchtitan
from sim.plugins import Registry, UnknownName

DEFAULT_FRAMEWORK = Pipesim.name
"""What an experiment without ``framework:`` runs: what ``sim validate`` replays."""

REGISTRY: Registry[Framework] = Registry(
    "framework",
    [
        Pipesim,
        MegatronDeepSpeed,
        MegatronLM,
        MegatronLMTorchDDP,
        DeepSpeed,
        Torchtitan,
        PytorchDDP,
    ],
    known=lambda names, _aliases: f"valid: {', '.join(names)}",
)
"""Every profile class, the default first."""

UnknownFrameworkError = UnknownName
"""An unknown framework name (a :class:`KeyError` whose ``str()`` lists the valid ones)."""


def framework_names() -> list[str]:
    """The profile names, the default first."""
    return REGISTRY.names()


_INSTANCES: dict[str, Framework] = {}


def _instance(cls: type[Framework]) -> Framework:
    if cls.name not in _INSTANCES:
        _INSTANCES[cls.name] = cls()
    return _INSTANCES[cls.name]


def get_framework(name: str) -> Framework:
    """The profile registered under ``name`` (one shared object per class).

    Raises:
        UnknownFrameworkError: a :class:`KeyError` whose message lists the valid names.

    Example:
        >>> get_framework("megatron-deepspeed").placement.value
        'megatron'
    """
    if not isinstance(name, str):
        raise UnknownFrameworkError(
            f"unknown framework {name!r}; valid: {', '.join(framework_names())}"
        )
    return _instance(REGISTRY.get(name))
