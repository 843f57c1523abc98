"""``sim calibrate --from-runs``: a few physical parameters of one's own cluster, fitted to its
measured runs, written as a hardware overlay.

Declared parameters (:data:`PARAMETERS`), each a field of the hardware description with the
preset's value as its prior and physical bounds:

========================  ================================  ========================================
name                      hardware field                    what it is, bounds
========================  ================================  ========================================
``gemm``                  ``gpu.matmul_efficiency``         achieved fraction of the dense bf16/fp16
                                                            tensor peak on large GEMMs (0.2-1)
``attention``             ``gpu.attention_efficiency``      fused attention's fraction of it (0.1-1)
``memory_bound``          ``gpu.hbm_efficiency``            memory-bound kernels' fraction of HBM
                                                            bandwidth (0.3-1)
``kernel_overhead``       ``gpu.kernel_overhead``           host dispatch and launch time per kernel
                                                            (0-100 us)
``host_op``               ``host_overhead.op`` (and         eager PyTorch's host time per op, as a
                          ``nograd_op``, ``backward_op``)   factor of the preset's (0.3-5), where
                                                            the preset models the host
``nvlink_busbw``          ``gpu.nccl_nvlink_bandwidth``     NCCL's rate per NVLink, as a factor of
                                                            the preset's (0.3-1.2)
``network_busbw``         ``network.nccl_nic_bandwidth``    NCCL's rate to the NIC, as a factor of
                                                            the preset's (0.3-1); multi-server runs
``network_latency``       ``network.latency``               per network link crossed (0-20 us);
                                                            multi-server runs
========================  ================================  ========================================

Fit (:func:`fit`): the residual of each run is ``log(predicted / measured) / NOISE`` (a run's
relative error over the noise of a measured iteration, :data:`NOISE`); each parameter adds a
prior residual ``(value - preset) / (PRIOR_WIDTH x preset)``; :func:`scipy.optimize.least_squares`
(trust-region reflective, within the bounds) minimises their squares. Parameters to which no run
is sensitive (a 10 % change moves no prediction by :data:`MIN_SENSITIVITY`) are not fitted and
say so. Uncertainty: the square roots of the diagonal of ``(J^T J)^-1`` at the optimum, scaled by
the data residuals' reduced chi-square when it exceeds 1. The leave-one-run-out error is
linearised: each run's residual after the Gauss-Newton step from the optimum that leaves it out
(exact for residuals linear in the parameters; a statement of how well the others predict it).
The error without calibration is the presets' own. Only iteration time is fitted: none of these
parameters changes memory.

Rules (HOUSE.md): constants come from datasheets, micro-benchmarks, the frameworks' code or this
command; the shipped presets are never calibrated, and ``../shared/data`` rows are for checking
(the closing note calibrates on one source and predicts another).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.atomic import atomic_write_text, check_writable
from sim.errors import InputError
from sim.hardware.calibration_parameters import NOT_MODELLED, PARAMETERS, Parameter
from sim.hardware.loader import load_hardware_spec, multi_server
from sim.runs.express import Expressed, express
from sim.runs.predict import Predictor
from sim.runs.readers import read_runs
from sim.runs.record import MeasuredRun

NOISE = 0.05
"""Relative spread of a measured iteration time between runs of one configuration (an
assumption: the same Megatron-Bridge configuration measured in several releases differs by a
median of 3.6 %, ``../shared/data/measured/`` README)."""
PRIOR_WIDTH = 0.25
"""How far (relative) a parameter may move from the preset before its prior costs as much as
one run's ``NOISE``-sized error: a weak prior (an assumption)."""
MIN_SENSITIVITY = 0.002
"""A parameter is fitted only when a 10 % change of it moves some run's prediction by more than
this (relative)."""


@dataclass
class Fit:
    """The result of :func:`fit`.

    Attributes:
        hardware: the preset the runs ran on (its servers' name).
        values: fitted value of every fitted parameter (hardware units: fractions, seconds,
            bytes/s); priors: the preset's value of every declared parameter.
        std: one-standard-deviation uncertainty of each fitted value.
        not_fitted: parameter -> why it was not fitted.
        runs: the runs fitted (expressed, measured and predicted at the prior).
        uncalibrated, calibrated, leave_one_out: per-run errors ``predicted / measured - 1``.
        skipped: runs not used, with the reason.
    """

    hardware: str
    values: dict[str, float]
    priors: dict[str, float]
    std: dict[str, float]
    not_fitted: dict[str, str]
    runs: list[MeasuredRun]
    uncalibrated: list[float]
    calibrated: list[float]
    leave_one_out: list[float]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    extra: dict[tuple[str, str], float] = field(default_factory=dict)

    def overlay(self) -> dict[str, Any]:
        """The fitted values as a hardware overlay mapping (absolute values)."""
        out: dict[str, Any] = {}
        for p in PARAMETERS:
            if p.name in self.values:
                factor = self.values[p.name] / self.priors[p.name] if self.priors[p.name] else 1
                out.setdefault(p.section, {}).update(
                    {p.key: float(self.values[p.name])}
                    | {k: float(self.extra[(p.section, k)] * factor) for k in p.also
                       if (p.section, k) in self.extra}
                )  # fmt: skip
        return out


def mape(errors: Sequence[float]) -> float:
    """Mean absolute relative error (nan for none)."""
    return float(np.mean(np.abs(errors))) if len(errors) else math.nan


def _prior(spec: Any, p: Parameter) -> float | None:
    part = getattr(spec, p.section, None)
    value = getattr(part, p.key, None) if part is not None else None
    return float(value) if value is not None else None


def _usable(runs: Iterable[MeasuredRun]) -> tuple[list[Expressed], list[tuple[str, str]]]:
    ok, skipped = [], []
    for run in runs:
        ex = express(run)
        if not isinstance(ex, Expressed):
            skipped.append((run.name, "not expressed: " + ex.reasons[0]))
        elif not run.measured.iteration_time_s:
            skipped.append((run.name, "no measured iteration time"))
        else:
            ok.append(ex)
    return ok, skipped


def _base(items: list[Expressed]) -> str:
    """The one server preset of the runs (``Nx-`` and ``nvlDxN-`` prefixes dropped)."""
    bases = {(multi_server(i.hardware) or (1, i.hardware))[1] for i in items}
    if len(bases) != 1:
        raise InputError(
            f"the runs are on {len(bases)} kinds of server ({', '.join(sorted(bases))}): "
            "calibrate one cluster at a time", field="RUNS",
        )  # fmt: skip
    return bases.pop()


class _Model:
    """Predicted times of the runs as a function of the parameters, each point cached."""

    def __init__(self, items: list[Expressed], params: list[Parameter], priors: dict[str, float],
                 extra: dict[tuple[str, str], float]):  # fmt: skip
        self.items, self.params, self.priors, self.extra = items, params, priors, extra
        self.measured = np.array([i.run.measured.iteration_time_s for i in items], dtype=float)
        self._cache: dict[tuple, np.ndarray] = {}

    def value(self, p: Parameter, u: float) -> float:
        """A parameter's value from its normalised coordinate ``u`` (1 = the preset's)."""
        prior = self.priors[p.name]
        return u * prior if prior > 0 else u * p.floor

    def overlay(self, u: Sequence[float] | np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p, x in zip(self.params, u, strict=True):
            sec = out.setdefault(p.section, {})
            sec[p.key] = self.value(p, float(x))
            for k in p.also:
                if (p.section, k) in self.extra:
                    sec[k] = self.extra[(p.section, k)] * float(x)
        return out

    def times(self, u: Sequence[float] | np.ndarray) -> np.ndarray:
        key = tuple(round(float(x), 10) for x in u)
        if key not in self._cache:
            predictor = Predictor(self.overlay(u) if self.params else None)
            preds = [predictor.predict(i).iteration_time_s for i in self.items]
            self._cache[key] = np.array([t if t else np.nan for t in preds], dtype=float)
        return self._cache[key]

    def residuals(self, u: Sequence[float] | np.ndarray) -> np.ndarray:
        data = np.log(self.times(u) / self.measured) / NOISE
        prior = (np.asarray(u, dtype=float) - 1.0) / PRIOR_WIDTH
        return np.concatenate([np.nan_to_num(data, nan=1e3), prior])


def _bounds(params: list[Parameter], priors: dict[str, float]) -> tuple[list[float], list[float]]:
    lo, hi = [], []
    for p in params:
        scale = 1.0 if p.relative else (priors[p.name] if priors[p.name] > 0 else p.floor)
        lo.append(p.low / scale)
        hi.append(p.high / scale)
    return lo, hi


def _sensitive(model: _Model, params: list[Parameter]) -> list[bool]:
    base = model.times([1.0] * len(params))
    out = []
    for j in range(len(params)):
        u = [1.0] * len(params)
        u[j] = 1.1 if model.priors[params[j].name] > 0 else 2.0
        out.append(bool(np.nanmax(np.abs(model.times(u) / base - 1)) > MIN_SENSITIVITY))
    return out


def _loo(jac: np.ndarray, res: np.ndarray, n_data: int, u: np.ndarray,
         bounds: tuple[list[float], list[float]]) -> np.ndarray:  # fmt: skip
    """Each run's residual after the Gauss-Newton step that leaves its row out (linearised),
    the step's parameters kept within their bounds."""
    out = np.empty(n_data)
    lo, hi = np.asarray(bounds[0]), np.asarray(bounds[1])
    for i in range(n_data):
        keep = np.arange(len(res)) != i
        j, r = jac[keep], res[keep]
        step = -np.linalg.lstsq(j, r, rcond=None)[0]
        step = np.clip(u + step, lo, hi) - u
        out[i] = res[i] + jac[i] @ step
    return out


def _check_names(only: Iterable[str] | None) -> None:
    """Every name of ``only`` (``--parameters``) is a declared parameter, checked before any
    run is read.

    Raises:
        InputError: naming ``--parameters``, each unknown name with the declared one it
            resembles.
    """
    declared = [p.name for p in PARAMETERS]
    unknown = sorted(set(only or ()) - set(declared))
    if unknown:
        said = []
        for name in unknown:
            close = difflib.get_close_matches(name, declared, n=1, cutoff=0.5)
            said.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise InputError(f"unknown parameter{'s' if len(said) > 1 else ''} {', '.join(said)}; "
                         "declared: "
                         f"{', '.join(declared)}", field="--parameters")  # fmt: skip


def fit(
    runs: Iterable[MeasuredRun],
    *,
    only: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Fit:
    """Fit the declared parameters to ``runs`` (module doc).

    Args:
        runs: measured runs of one cluster (one kind of server).
        only: fit these parameters only (names of :data:`PARAMETERS`); default: every one the
            runs are sensitive to.
        progress: called with a line of progress now and then.

    Raises:
        InputError: no run usable (none expressed with a measured time), runs on several kinds
            of server, or an unknown parameter name.
    """
    say = progress or (lambda _msg: None)
    only = None if only is None else list(only)
    _check_names(only)
    items, skipped = _usable(runs)
    if not items:
        why = "; ".join(f"{n}: {r}" for n, r in skipped[:5])
        raise InputError(f"no run can be fitted ({why})", field="RUNS")
    base = _base(items)
    spec = load_hardware_spec(base)
    names = set(only) if only is not None else {p.name for p in PARAMETERS}
    multi = any(load_hardware_spec(i.hardware).servers > 1 for i in items)
    priors, not_fitted, params = {}, dict(NOT_MODELLED), []
    extra = {(p.section, k): v for p in PARAMETERS for k in p.also
             if (v := _prior(spec, Parameter(p.name, p.section, k, 0, 0))) is not None}  # fmt: skip
    for p in PARAMETERS:
        prior = _prior(spec, p)
        if prior is None:
            not_fitted[p.name] = f"the preset {base} has no {p.section}.{p.key}"
        elif p.multi_server and not multi:
            not_fitted[p.name] = "no run crosses servers"
        elif p.name not in names:
            not_fitted[p.name] = "not asked for"
        else:
            priors[p.name] = prior
            params.append(p)
    model = _Model(items, params, priors, extra)
    say(f"{len(items)} runs on {base}; sensitivity of {len(params)} parameters")
    sens = _sensitive(model, params)
    for p, s in zip(list(params), sens, strict=True):
        if not s:
            not_fitted[p.name] = "no run is sensitive to it (kept at the preset's value)"
            params.remove(p)
    model = _Model(items, params, priors, extra)
    u0 = np.ones(len(params))
    uncal = list(np.exp(model.residuals(u0)[: len(items)] * NOISE) - 1)
    lo, hi = _bounds(params, priors)
    if params:
        from scipy.optimize import least_squares  # 0.4 s to import: only when fitting

        say(f"fitting {', '.join(p.name for p in params)}")
        res = least_squares(model.residuals, u0, bounds=(lo, hi), method="trf", diff_step=1e-3,
                            x_scale="jac")  # fmt: skip
        u, jac, r = res.x, res.jac, res.fun
    else:
        u, jac, r = u0, np.zeros((len(items), 0)), model.residuals(u0)
    n = len(items)
    data = r[:n]
    cal = list(np.exp(data * NOISE) - 1)
    chi2 = float(np.sum(data**2) / (n - len(params))) if n > len(params) else 1.0
    cov = np.linalg.pinv(jac.T @ jac) * max(1.0, chi2) if params else np.zeros((0, 0))
    values, std = {}, {}
    for j, p in enumerate(params):
        values[p.name] = model.value(p, float(u[j]))
        std[p.name] = abs(model.value(p, 1.0) - model.value(p, 0.0)) * math.sqrt(cov[j, j])
    loo = list(np.exp(_loo(jac, r, n, u, (lo, hi)) * NOISE) - 1) if params and n > 1 else cal
    return Fit(base, values, priors, std, not_fitted, [i.run for i in items], uncal, cal, loo,
               skipped, extra)  # fmt: skip


def overlay_document(result: Fit, sources: Sequence[str]) -> dict[str, Any]:
    """The overlay file's content: provenance, errors, then the fitted values."""
    params = {
        p.name: {
            "field": f"{p.section}.{p.key}", "value": float(result.values[p.name]),
            "std": float(result.std[p.name]), "preset": float(result.priors[p.name]),
            "bounds": [p.low, p.high] if not p.relative else
            [p.low * result.priors[p.name], p.high * result.priors[p.name]], "what": p.what,
        }
        for p in PARAMETERS if p.name in result.values
    }  # fmt: skip
    prov = {
        "written_by": "sim calibrate --from-runs (sim.calibrate_runs)",
        "hardware": result.hardware,
        "runs": list(sources),
        "runs_fitted": len(result.runs),
        "runs_skipped": len(result.skipped),
        "parameters": params,
        "not_fitted": result.not_fitted,
        "error": {
            "uncalibrated_mape": mape(result.uncalibrated),
            "calibrated_mape": mape(result.calibrated),
            "leave_one_out_mape": mape(result.leave_one_out),
            "note": "predicted / measured - 1 of iteration time over the runs fitted; leave-one-"
            "out linearised (sim.calibrate_runs)",
        },
    }
    return {"calibration": prov, **result.overlay()}


def calibrate_from_runs(
    sources: Sequence[str | Path],
    *,
    out: Path,
    only: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
    **opts: Any,
) -> Fit:
    """``sim calibrate --from-runs``: read the runs, fit, write the overlay to ``out``.

    Raises:
        InputError: unreadable runs, nothing to fit, several clusters, an unwritable file.
    """
    check_writable(out, option="--out")
    runs = [r for s in sources for r in read_runs(s, **opts)]
    result = fit(runs, only=only, progress=progress)
    doc = overlay_document(result, [str(s) for s in sources])
    atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False))
    return result


__all__ = [
    "NOT_MODELLED",  # re-exported: sim.hardware.calibration_parameters
    "PARAMETERS",
    "Fit",
    "Parameter",
    "calibrate_from_runs",
    "fit",
    "mape",
    "overlay_document",
]
