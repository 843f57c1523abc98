"""Switches a Megatron-Bridge H100 performance recipe turns off, by release and model.

A Bridge row without a recipe-table entry starts from the settings every recipe shares
(:mod:`sim.runs.bridge_fallback`: distributed optimizer, gradient-reduce and parameter-gather
overlap, the precision-aware optimizer under BF16), and an H100 row adds its preset's own
(:mod:`sim.runs.bridge_hopper`). Some H100 recipes turn shared settings off again; :data:`OFF`
lists every such case found in NVIDIA-NeMo/Megatron-Bridge at the release tags of
``measurements/megatron-bridge/hopper.md`` (v0.1.0rc3 .. v0.6.0; ``scripts/performance``,
``src/megatron/bridge/perf_recipes`` and the base recipes they start from), each with its
``tag:file:line``. The cells are ``recipes.csv``'s columns, so
:func:`sim.runs.bridge_recipes.recipe_flags` turns them into flags (an off cell is
``flag: False``) as it does a Blackwell recipe row, whose table already holds the traced value
of each switch.

Whether an off value holds: ``comm_overlap.overlap_grad_reduce = False`` is a user value of
``CommOverlapConfig``, which overrides its own DP > 1 rule
(``src/megatron/bridge/training/comm_overlap.py:530-568`` at v0.1.0rc3, ``562-602`` at v0.6.0,
``_get_optimizer_overlap_cfgs`` / ``_override_user_cfgs``); a ``ddp.*`` value holds where the
recipe has no ``CommOverlapConfig`` (Nemotron 3 Super) or no distributed optimizer (Kimi K2 with
Muon: ``setup`` applies the optimizer overlap only with ``ddp_config.use_distributed_optimizer``,
``comm_overlap.py:639`` at v0.6.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.runs.bridge_hopper import model_key, precision_key
from sim.runs.bridge_recipes import recipe_flags


@dataclass(frozen=True)
class OffSwitch:
    """Settings one H100 recipe turns off: the model (:func:`~sim.runs.bridge_hopper.model_key`),
    its releases, the precisions (:func:`~sim.runs.bridge_hopper.precision_key`; empty: all),
    the recipe-table cells and their source."""

    model: str
    releases: tuple[str, ...]
    cells: tuple[tuple[str, str], ...]
    source: str
    precisions: tuple[str, ...] = ()


GRAD = (("overlap_grad_reduce", "False"),)
"""``comm_overlap.overlap_grad_reduce = False``: gradients reduced after the backward pass."""
MUON = (("overlap_param_gather", "False"), ("use_distributed_optimizer", "False"),
        ("overlap_param_gather_with_optimizer_step", "False"),
        ("precision_aware_optimizer", "False"), ("optimizer", "dist_muon"))  # fmt: skip
"""Kimi K2 on H100 trains with Muon (``optimizer_type="muon"``, the H100 function's default;
``distributed_muon_with_cosine_annealing``: ``optimizer="dist_muon"``,
``recipes/utils/optimizer_utils.py:68`` at v0.3.1), which needs the distributed optimizer and its
parameter gather off (sources in :data:`OFF`); the launcher's BF16 precision-aware rule is
Adam's only (``scripts/performance/utils/overrides.py:436`` at v0.3.1, ``461`` at v0.4.x, ``516``
at v0.5.x; ``run_script.py:149-151`` at v0.6.0). The H100 function's
``comm_overlap.overlap_grad_reduce = False`` (``kimi_llm_pretrain.py:228`` at v0.3.1, ``218`` at
v0.4.x, ``299`` at v0.5.x; ``perf_recipes/kimi/h100/kimi_k2.py:50, 96`` at v0.6.0) does not
reach DDP: ``CommOverlapConfig.setup`` applies its DP overlap only with the distributed
optimizer, so the base recipe's ``ddp.overlap_grad_reduce = True`` holds
(``recipes/kimi/kimi_k2.py:199`` at v0.3.1, ``202`` at v0.4.0 .. v0.5.1;
``recipes/kimi/h100/kimi_k2.py:202`` at v0.6.0): the gradient-reduce overlap stays on."""
KIMI = "src/megatron/bridge/recipes/kimi/kimi_k2.py"
DSV3_PERF = "scripts/performance/configs/deepseek/deepseek_llm_pretrain.py"
OFF: tuple[OffSwitch, ...] = (
    OffSwitch("deepseekv3", ("25.09",), GRAD,
              "v0.1.0rc3:scripts/performance/run_script.py:94-95 (-g h100)"),
    OffSwitch("deepseekv3", ("25.11",), GRAD,
              f"v0.2.0:{DSV3_PERF}:170 (deepseek_v3_h100_config)"),
    OffSwitch("deepseekv3", ("26.02",), GRAD, f"v0.3.0:{DSV3_PERF}:203 "
              "(deepseek_v3_pretrain_config_h100)"),
    OffSwitch("deepseekv3", ("26.02.01",), GRAD, f"v0.3.1:{DSV3_PERF}:223"),
    OffSwitch("deepseekv3", ("26.04", "26.04.01"), GRAD, f"v0.4.0, v0.4.1:{DSV3_PERF}:248"),
    OffSwitch("deepseekv3", ("26.06",), GRAD, f"v0.5.0:{DSV3_PERF}:284"),
    OffSwitch("deepseekv3", ("26.06.01",), GRAD, f"v0.5.1:{DSV3_PERF}:291"),
    OffSwitch("deepseekv3", ("26.08",), GRAD,
              "v0.6.0:src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py:45-46 (BF16, "
              "1024 and 64 GPUs), 94-95 (FP8-CS 1024 GPUs; FP8-SC starts from it), 209-210 "
              "(FP8-CS 64 GPUs)"),
    OffSwitch("kimik2", ("26.02.01",), MUON, f"v0.3.1:{KIMI}:53, 196-197"),
    OffSwitch("kimik2", ("26.04", "26.04.01", "26.06", "26.06.01"), MUON,
              f"v0.4.0 .. v0.5.1:{KIMI}:53, 199-200"),
    OffSwitch("kimik2", ("26.08",), MUON,
              "v0.6.0:src/megatron/bridge/recipes/kimi/h100/kimi_k2.py:74-75, 200 (the base of "
              "perf_recipes/kimi/h100/kimi_k2.py:27, 73)"),
    OffSwitch("nemotron3super", ("26.08",),
              (("overlap_grad_reduce", "False"), ("overlap_param_gather", "False")),
              "v0.6.0:src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_super.py:232-233 "
              "(the base of perf_recipes/nemotronh/h100/nemotronh.py:71-83, which sets "
              "ddp.overlap_param_gather = False again at 83; no CommOverlapConfig on the way)",
              ("BF16",)),
)  # fmt: skip
"""Every H100 off-switch of releases 25.09 .. 26.08 (module doc; ``hopper.md`` lists what was
searched and what is not an off-switch)."""


@dataclass(frozen=True)
class Off:
    """The off cells that apply to one row, their Megatron-LM flags
    (:func:`~sim.runs.bridge_recipes.recipe_flags`: ``flag: False`` for each off) and the
    approximation note that names them."""

    cells: dict[str, str]
    flags: dict[str, Any]
    note: str


def off_switches(model: str, gpu: str, precision: str, release: str) -> Off | None:
    """The cells an H100 recipe of ``release`` turns off for ``model`` (module doc); None where
    none applies (another GPU, model, precision or release).

    Args:
        model: the table's model name (``DeepSeekV3``, ``Kimi_K2``...).
        gpu: the row's GPU (``H100``, ``H100 SXM``); other GPUs have none.
        precision: the row's precision label (``BF16``, ``FP8-CS``...).
        release: the release whose recipe the row runs (``26.04.01``).

    Example:
        >>> off_switches("DeepSeekV3", "H100", "FP8-CS", "25.09").flags
        {'overlap-grad-reduce': False}
        >>> off_switches("DeepSeekV3", "H200", "FP8-CS", "25.09") is None
        True
    """
    if not gpu.strip().upper().startswith("H100"):
        return None
    key, prec = model_key(model), precision_key(precision)
    for off in OFF:
        if off.model == key and release in off.releases and (
                not off.precisions or prec in off.precisions):  # fmt: skip
            cells = dict(off.cells)
            text = ", ".join(f"{k}={v}" for k, v in off.cells)
            note = (f"recipe turns off: {text} (Megatron-Bridge {release}, {off.source}; "
                    "sim.runs.bridge_offswitch)")  # fmt: skip
            return Off(cells, recipe_flags(cells), note)
    return None
