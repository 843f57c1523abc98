"""Framework profiles: what the training framework does around the model (issue 16).

One class per framework (``pipesim`` the default, ``megatron-deepspeed``, ``megatron-lm``,
``deepspeed``, ``torchtitan``, ``pytorch-ddp``), each setting with its source
(:mod:`sim.framework.base`), a registry (:mod:`sim.framework.registry`), and the layer
placements they use (:mod:`sim.framework.placement`).
"""

from sim.framework.base import Framework, Setting
from sim.framework.registry import DEFAULT_FRAMEWORK, framework_names, get_framework

__all__ = ["DEFAULT_FRAMEWORK", "Framework", "Setting", "framework_names", "get_framework"]
