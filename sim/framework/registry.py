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
from sim.framework.options import split_spec
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


def get_framework(name: str) -> Framework:
    """The profile ``name`` names: a registered name, or a spec string with options
    (``megatron-lm[overlap_grad_reduce,tp_comm_overlap]``, :mod:`sim.framework.options`); one
    shared object per canonical spec.

    Raises:
        UnknownFrameworkError: a :class:`KeyError` whose message lists the valid names, or
            names the profile's valid options when one is unknown or its value is bad.

    Example:
        >>> get_framework("megatron-deepspeed").placement.value
        'megatron'
        >>> get_framework("megatron-lm[overlap_grad_reduce=true]").spec
        'megatron-lm[overlap_grad_reduce]'
    """
    if not isinstance(name, str):
        raise UnknownFrameworkError(
            f"unknown framework {name!r}; valid: {', '.join(framework_names())}"
        )
    cached = _INSTANCES.get(name)
    if cached is not None:
        return cached
    try:
        base, given = split_spec(name)
    except ValueError as exc:
        raise UnknownFrameworkError(f"framework {exc}") from None
    cls = REGISTRY.get(base)
    try:
        profile = cls(given)
    except ValueError as exc:
        raise UnknownFrameworkError(str(exc)) from None
    profile = _INSTANCES.setdefault(profile.spec, profile)
    _INSTANCES[name] = profile
    return profile
