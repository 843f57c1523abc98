"""Megatron-LM's logging and checking flags as options of the ``megatron-lm`` profile: the host
work they add to each iteration (:mod:`sim.framework.megatron_host`).

Each flag of :data:`FLAG_OPTIONS` becomes ``option=value`` on the run's framework spec
(``megatron-lm[log_interval=1,log_params_norm]``); an option at its default is not written.
"""

from __future__ import annotations

from typing import Any

from sim.runs.argv import switch_on
from sim.runs.record import Status

FLAG_OPTIONS: dict[str, tuple[str, str]] = {
    "log-num-zeros-in-grad": ("log_num_zeros_in_grad", "zeros in the gradients counted at "
                              "each step"),
    "log-params-norm": ("log_params_norm", "the parameters' norm reduced at each step"),
    "log-interval": ("log_interval", "iterations between logs"),
    "tensorboard-dir": ("tensorboard", "tensorboard scalars written at each log"),
    "no-check-for-nan-in-loss-and-grad": ("check_for_nan_in_loss", "the loss not read back "
                                          "after each forward"),
    "calculate-per-token-loss": ("per_token_loss", "the gradients scaled by the global token "
                                 "count once at the step (sim.framework.per_token_loss)"),
    "deterministic-mode": ("deterministic_mode", "every tensor the TE layers allocate "
                           "through empty filled first (sim.framework.deterministic)"),
    "rerun-mode": ("rerun_mode", "the re-run flag all-reduced over every rank and read back "
                   "after each forward-backward (sim.framework.megatron_host)"),
}  # fmt: skip
"""Flag -> (option, what it adds)."""

DEFAULTS = {"log_interval": "100", "check_for_nan_in_loss": "true",
            "rerun_mode": "validate_results"}  # fmt: skip
"""Options whose default is not ``false`` (Megatron's ``--log-interval 100``; the NaN check on
unless ``--no-check-for-nan-in-loss-and-grad``; ``--rerun-mode validate_results``)."""


def option_value(flag: str, value: Any) -> str | None:
    """The option's value for ``flag = value``; None: the option stays at its default.

    Example:
        >>> option_value("log-interval", "1"), option_value("log-params-norm", True)
        ('1', 'true')
        >>> option_value("no-check-for-nan-in-loss-and-grad", True), option_value("log-interval", 100)
        ('false', None)
        >>> option_value("rerun-mode", "disabled"), option_value("rerun-mode", "validate_results")
        ('disabled', None)
    """
    name = FLAG_OPTIONS[flag][0]
    if flag == "no-check-for-nan-in-loss-and-grad":
        text = "false"
    elif flag == "log-interval":
        try:
            text = str(int(float(value)))
        except (TypeError, ValueError):
            return None
    elif flag == "rerun-mode":
        text = str(value).strip().lower()
    elif flag == "tensorboard-dir":
        text = "true" if value not in (None, False, "", "None") else "false"
    else:
        text = "true" if switch_on(value) else "false"
    return None if text == DEFAULTS.get(name, "false") else text


def transformer_impl(flags: dict[str, Any]) -> str:
    """``local`` for ``--transformer-impl local`` or ``--spec local`` (Megatron's own layers),
    else ``transformer_engine`` (Megatron-Core's default, ``transformer_config.py``).

    Example:
        >>> transformer_impl({"spec": "local"}), transformer_impl({})
        ('local', 'transformer_engine')
    """
    spec = flags.get("spec")
    spec_local = spec == "local" or (isinstance(spec, list) and spec[-1:] == ["local"])
    return (
        "local" if flags.get("transformer-impl") == "local" or spec_local else "transformer_engine"
    )


def fill_options(flags: dict[str, Any]) -> dict[str, str]:
    """With ``--deterministic-mode``, the options that set how many tensors a layer fills
    (:func:`sim.framework.deterministic.layer_fills`): ``attention_backend`` from
    ``--attention-backend`` and ``gradient_accumulation_fusion`` from
    ``--no-gradient-accumulation-fusion``, when not Megatron's defaults; none without it (the
    two flags keep their own notes).

    Example:
        >>> fill_options({"deterministic-mode": True, "attention-backend": "unfused",
        ...               "no-gradient-accumulation-fusion": True})
        {'attention_backend': 'unfused', 'gradient_accumulation_fusion': 'false'}
        >>> fill_options({"attention-backend": "unfused"})
        {}
    """
    if not switch_on(flags.get("deterministic-mode")):
        return {}
    out: dict[str, str] = {}
    backend = str(flags.get("attention-backend", "auto"))
    if backend in ("flash", "fused", "unfused", "local"):
        out["attention_backend"] = backend
    if switch_on(flags.get("no-gradient-accumulation-fusion")):
        out["gradient_accumulation_fusion"] = "false"
    return out


def read_host_options(
    flags: dict[str, Any],
) -> tuple[dict[str, str], list[tuple[str, Status, str]]]:
    """``(options, notes)`` of the flags in :data:`FLAG_OPTIONS` and :func:`fill_options`
    (module doc)."""
    options: dict[str, str] = fill_options(flags)
    notes: list[tuple[str, Status, str]] = []
    if transformer_impl(flags) == "local":
        options["transformer_impl"] = "local"
    if "transformer-impl" in flags:
        notes.append(("transformer-impl", "mapped", f"framework option transformer_impl="
                      f"{transformer_impl(flags)} (host work of Transformer Engine's modules; "
                      "the kernel model times either)"))  # fmt: skip
    for flag, (name, why) in FLAG_OPTIONS.items():
        if flag not in flags:
            continue
        value = option_value(flag, flags[flag])
        if value is None:
            notes.append((flag, "ignored", f"{why}: Megatron's default"))
            continue
        options[name] = value
        notes.append((flag, "mapped", f"framework option {name}={value} (host work: {why})"))
    return options, notes


__all__ = ["FLAG_OPTIONS", "fill_options", "read_host_options", "transformer_impl"]
