"""What vTrain's "measured" rows are made of, read off their structure (diagnostic only).

``../shared/data/vtrain/`` holds VIA-Research/vTrain@f8dda84's ``data/ground_truth_single.csv``
split by hidden size. Within one ``(h, t, p, w, b)`` group the rows fit
``T = a + c L + m (e + f L)`` (layers ``L``, micro-batches ``m``: :func:`fit`) to 1e-5, and this
prints four things that measured wall times of separate runs cannot show:

1. ``e`` and ``f`` (per micro-batch, per micro-batch and layer, ``f`` scaled by ``p``) are one
   number per ``(h, t, b)``, shared by every pipeline and data-parallel width to about six
   digits (:func:`shared_parts`): the rows are composed from per-``(t, b)`` parts.
2. At ``t = 1, p = 1`` the per-layer slope ``c`` changes with the data-parallel width exactly
   as vTrain's own predictor prices an all-reduce above 1 GiB,
   ``size_MiB / (busbw_1GiB x 1024)`` with no ring factor ``2 (w - 1) / w``
   (``src/predictor.py::vTrain.compute_comm_time`` l.545-563 at f8dda84, used for the
   data-parallel ``CommNode`` of a stage's whole gradient, l.292-303): :func:`dp_slopes`.
   So ``c`` falls from ``w = 2`` to ``w = 8`` where the same all-reduce table run as a ring
   (what NCCL measures, and pipesim models) rises.
3. At ``t = 2, p = 1, w = 4`` the data-parallel cost ``T(w = 4) - T(w = 1)`` falls from 16 to
   20 layers, where the stage's gradient crosses 1 GiB and that formula takes over from the
   table (:func:`dp_steps`); no all-reduce gets faster with more bytes.

So the per-iteration data-parallel part of these rows is vTrain's model, not a measurement.

4. The same layout ``(L, t, p, w, b, B)`` runs faster at ``h = 2048`` than at ``h = 1024`` in
   112 of the 720 pairs (t 4 and t 8, b <= 2, by up to 15 %: :func:`size_inversions`), though
   the larger model runs the same ops and host calls on more data. A model that is never faster
   at the larger size has, on each such pair, at least ``(T_1024 - T_2048) / T_1024`` of
   absolute relative error summed over its two rows (both predicted at ``T_2048``; any other
   prediction costs more): :func:`inversion_floor`, 1.36 points of a hidden size's 720-row MAPE
   in all, to be shared between them.

With ``--predictions OUT/predictions.csv`` (``bench_measured_data.py``'s) it also prints each
hidden size's MAPE against the rows as they are and against the rows with the data-parallel
term of 2 and 3 run as a
ring over the same table (:func:`ring_s`, :func:`dp_adjustment_s`): a what-if that says how much
of the error is the formula's, never a target.

Nothing here feeds pipesim (its constants never come from these rows). Run:
``python benchmarks/accuracy/vtrain_provenance.py [--predictions OUT/predictions.csv]``
(``$PIPESIM_SHARED_DATA`` or ``../shared/data``).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data")) / "vtrain"
LUT = ROOT / "measurements" / "vtrain" / "allreduce_lut.csv"
GROUP = ["tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size"]
LAYOUT = ["layers", "global_batch", *GROUP]
"""A row's layout but its hidden size (vTrain's column names)."""
GIB = 2**30
VOCAB = 50257
"""vTrain's GPT vocabulary (GPT-2 BPE, unpadded: ``src/model/gpt_model.py`` at f8dda84)."""


def fit(g: pd.DataFrame) -> tuple[float, float, float, float]:
    """``a, c, e, f`` (ms) of ``T = a + c L + m (e + f L)`` fitted to one group's rows
    (``layers``, ``m``, ``iteration_time_ms``), least squares; ``c`` and ``f`` per layer of
    one stage (times ``p``).

    Example (T = 1 + 2 L + m (3 + 4 L), p = 1):
        >>> g = pd.DataFrame({"layers": [1, 2, 1, 2], "m": [1, 1, 2, 2],
        ...                   "pipeline_parallel": 1})
        >>> g["iteration_time_ms"] = 1 + 2 * g.layers + g.m * (3 + 4 * g.layers)
        >>> [round(v, 6) for v in fit(g)]
        [1.0, 2.0, 3.0, 4.0]
    """
    x = np.c_[np.ones(len(g)), g.layers, g.m, g.m * g.layers]
    a, c, e, f = np.linalg.lstsq(x, g.iteration_time_ms.to_numpy(), rcond=None)[0]
    p = int(g.pipeline_parallel.iloc[0])
    return float(a), float(c * p), float(e), float(f * p)


def groups(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per group with two layer counts and two micro-batch counts: ``t, p, w, b`` and
    its :func:`fit`."""
    rows = rows.assign(m=rows.global_batch // (rows.microbatch_size * rows.data_parallel))
    out = []
    for key, g in rows.groupby(GROUP):
        if g.layers.nunique() > 1 and g.m.nunique() > 1:
            out.append(dict(zip("tpwb", key, strict=True)) | dict(zip("acef", fit(g), strict=True)))
    return pd.DataFrame(out)


def shared_parts(parts: pd.DataFrame) -> pd.DataFrame:
    """Per ``(t, b)``: how many ``(p, w)`` groups, ``f`` and ``e`` (ms) and their relative
    spread over those groups (``e`` varies with ``p``: the spread is over ``w`` at each ``p``)."""
    out = []
    for (t, b), g in parts.groupby(["t", "b"]):
        e_spread = max(np.ptp(x.e) / x.e.mean() for _, x in g.groupby("p"))
        out.append({"t": t, "b": b, "groups": len(g), "f_ms": g.f.mean(),
                    "f_spread": np.ptp(g.f) / g.f.mean(), "e_spread_over_w": e_spread})  # fmt: skip
    return pd.DataFrame(out)


def vtrain_comm_s(nbytes: float, n: int, lut: pd.DataFrame) -> float:
    """vTrain's all-reduce time (``compute_comm_time``): the table's time at the size rounded to
    MiB up to 1024 MiB (interpolated here between the kept sizes), beyond it
    ``size_MiB / (busbw_1GiB x 1024)`` seconds, ``busbw`` in GB/s as the table gives it.

    Example (2 GPUs, 1 GiB in 5.4428 ms: busbw 197.27; 2 GiB takes 2048 / (197.27 x 1024) s,
    under the 1 GiB table time, where a ring would take twice it):
        >>> lut = pd.DataFrame({"gpus": [2], "bytes": [GIB], "time_us": [5442.8]})
        >>> round(vtrain_comm_s(2 * GIB, 2, lut) * 1e3, 3)
        10.138
    """
    g = lut[lut.gpus == n].sort_values("bytes")
    if round(nbytes / 2**20) <= 1024:
        return float(np.interp(nbytes, g.bytes, g.time_us)) * 1e-6
    return (nbytes / 2**20) / (busbw_gbs(g) * 1024)


def busbw_gbs(g: pd.DataFrame) -> float:
    """nccl-tests' bus bandwidth (GB/s) of one communicator size's 1 GiB all-reduce."""
    n = int(g.gpus.iloc[0])
    t_s = float(g[g.bytes == GIB].time_us.iloc[0]) * 1e-6
    return GIB / t_s * 2 * (n - 1) / n / 1e9


def dp_slopes(parts: pd.DataFrame, h: int, lut: pd.DataFrame) -> pd.DataFrame:
    """At ``t = 1, p = 1``: the rows' per-layer slope ``c`` by width against ``w = 2``, beside
    vTrain's formula (:func:`vtrain_comm_s` above 1 GiB) and a ring run at the table's 1 GiB
    rate, for one layer's 16-bit gradient (``12 h^2 + 13 h`` parameters), in ms."""
    layer_b = 2.0 * (12 * h * h + 13 * h)
    sel = parts[(parts.t == 1) & (parts.p == 1)]
    ref = sel[sel.w == 2].set_index("b").c
    out = []
    for r in sel[sel.w > 2].itertuples():
        g, g2 = lut[lut.gpus == r.w], lut[lut.gpus == 2]
        formula = layer_b / 2**20 / 1024 * (1 / busbw_gbs(g) - 1 / busbw_gbs(g2))
        ring = layer_b / GIB * (_t1g(g) - _t1g(g2))
        out.append({"w": r.w, "b": r.b, "rows_dc_ms": r.c - ref[r.b],
                    "vtrain_formula_ms": formula * 1e3, "ring_ms": ring * 1e3})  # fmt: skip
    return pd.DataFrame(out)


def _t1g(g: pd.DataFrame) -> float:
    return float(g[g.bytes == GIB].time_us.iloc[0]) * 1e-6


def dp_steps(rows: pd.DataFrame, h: int, t: int, w: int, lut: pd.DataFrame) -> pd.DataFrame:
    """At ``p = 1, b = 1``: ``T(w) - T(w = 1)`` at the same ``L`` and ``m`` (ms) beside
    :func:`vtrain_comm_s` of the stage's whole 16-bit gradient (layers, word and position
    embeddings, final norm; the vocabulary unpadded, :data:`VOCAB`)."""
    d = rows[(rows.tensor_parallel == t) & (rows.pipeline_parallel == 1)]
    d = d[d.microbatch_size == 1].assign(m=lambda x: x.global_batch // x.data_parallel)
    one, wide = d[d.data_parallel == 1], d[d.data_parallel == w]
    both = wide.merge(one, on=["layers", "m"], suffixes=("", "_1"))
    out = []
    for r in both.sort_values(["m", "layers"]).itertuples():
        params = r.layers * (12 * h * h + 13 * h) / t + VOCAB * h / t + 1024 * h + 2 * h
        out.append({"L": r.layers, "m": r.m, "stage_MiB": 2 * params / 2**20,
                    "rows_ms": r.iteration_time_ms - r.iteration_time_ms_1,
                    "vtrain_ms": vtrain_comm_s(2 * params, w, lut) * 1e3})  # fmt: skip
    return pd.DataFrame(out)


def ring_s(nbytes: float, n: int, lut: pd.DataFrame) -> float:
    """The table's all-reduce time, interpolated up to 1 GiB and linear in the bytes beyond it
    (a ring's time per byte is flat there).

    Example:
        >>> lut = pd.DataFrame({"gpus": [2], "bytes": [GIB], "time_us": [5442.8]})
        >>> round(ring_s(2 * GIB, 2, lut) * 1e3, 4)
        10.8856
    """
    g = lut[lut.gpus == n].sort_values("bytes")
    if nbytes <= GIB:
        return float(np.interp(nbytes, g.bytes, g.time_us)) * 1e-6
    return _t1g(g) * nbytes / GIB


def dp_adjustment_s(h: int, layers: int, t: int, p: int, w: int, lut: pd.DataFrame) -> float:
    """Seconds a row would gain if its data-parallel all-reduce of the first stage's 16-bit
    gradient (``layers / p`` blocks, word and position embeddings, final norm) ran as a ring
    over vTrain's table instead of vTrain's formula (:func:`ring_s` - :func:`vtrain_comm_s`;
    0 without data parallelism and up to 1 GiB, where both read the table)."""
    if w == 1:
        return 0.0
    params = layers / p * (12 * h * h + 13 * h) / t + VOCAB * h / t + 1024 * h + 2 * h
    return ring_s(2 * params, w, lut) - vtrain_comm_s(2 * params, w, lut)


def what_if(path: str, lut: pd.DataFrame) -> pd.DataFrame:
    """Per hidden size: MAPE and signed error (%) of ``path``'s vTrain rows as measured and with
    :func:`dp_adjustment_s` added to the measured times."""
    df = pd.read_csv(path)
    df = df[df.source.astype(str).str.startswith("vtrain")]
    name = re.compile(r"h(\d+)-L(\d+)-t(\d+)p(\d+)w(\d+)b(\d+)B(\d+)")
    k = df.model.str.extract(name).astype(int)
    adj = [dp_adjustment_s(r[0], r[1], r[2], r[3], r[4], lut) for r in k.itertuples(index=False)]
    df = df.assign(h=k[0], adj_s=adj)
    out = []
    for h, g in df.groupby("h"):
        e0 = g.predicted_s / g.measured_s - 1
        e1 = g.predicted_s / (g.measured_s + g.adj_s) - 1
        out.append({"h": h, "rows_moved": int((g.adj_s > 0).sum()),
                    "mape": e0.abs().mean() * 100, "signed": e0.mean() * 100,
                    "mape_ring": e1.abs().mean() * 100, "signed_ring": e1.mean() * 100})  # fmt: skip
    return pd.DataFrame(out)


def size_inversions(small: pd.DataFrame, large: pd.DataFrame) -> pd.DataFrame:
    """The layouts of vTrain's rows (columns :data:`LAYOUT`) that the ``large`` hidden size
    runs faster than the ``small`` one, with both times (``ms_small``, ``ms_large``) and
    ``floor``, the least summed absolute relative error of any prediction not faster at the
    larger size (module doc): ``(ms_small - ms_large) / ms_small``.

    Example (one layout inverted by 10 %, one not):
        >>> a = pd.DataFrame({**{c: [1, 2] for c in LAYOUT}, "iteration_time_ms": [10.0, 5.0]})
        >>> b = a.assign(iteration_time_ms=[9.0, 8.0])
        >>> size_inversions(a, b)[["ms_small", "ms_large", "floor"]].round(2).values.tolist()
        [[10.0, 9.0, 0.1]]
    """
    both = small.merge(large, on=LAYOUT, suffixes=("_s", "_l"))
    both = both.rename(
        columns={"iteration_time_ms_s": "ms_small", "iteration_time_ms_l": "ms_large"}
    )
    inv = both[both.ms_large < both.ms_small]
    return inv[LAYOUT + ["ms_small", "ms_large"]].assign(
        floor=(inv.ms_small - inv.ms_large) / inv.ms_small
    )


def inversion_floor(small: pd.DataFrame, large: pd.DataFrame) -> tuple[int, float]:
    """``(inverted pairs, points)``: how many layouts :func:`size_inversions` finds and the
    least summed absolute percentage error they force, in points of one hidden size's MAPE
    (the sum of ``floor`` x 100 over the ``small`` side's row count)."""
    inv = size_inversions(small, large)
    return len(inv), float(inv.floor.sum() * 100 / len(small))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--predictions", help="bench_measured_data.py's predictions.csv")
    args = ap.parse_args()
    lut = pd.read_csv(LUT)
    pd.set_option("display.width", 200)
    for h in (1024, 2048):
        rows = pd.read_csv(DATA / f"ground_truth_single_h{h}.csv")
        parts = groups(rows)
        print(f"== h{h}: e and f shared by every (p, w) of a (t, b)")
        print(shared_parts(parts).to_string(index=False, float_format="%.2e"))
        print(f"== h{h}, t 1, p 1: per-layer slope c against w = 2 (ms)")
        print(dp_slopes(parts, h, lut).round(4).to_string(index=False))
    rows = pd.read_csv(DATA / "ground_truth_single_h2048.csv")
    print("== h2048, t 2, p 1, w 4 against w 1, b 1 (ms)")
    print(dp_steps(rows, 2048, 2, 4, lut).round(3).to_string(index=False))
    small, large = (pd.read_csv(DATA / f"ground_truth_single_h{h}.csv") for h in (1024, 2048))
    inv = size_inversions(small, large)
    n, pts = inversion_floor(small, large)
    print(f"== layouts faster at h2048 than at h1024: {n} of {len(small)}; forced error "
          f"{pts:.2f} points of one size's MAPE")  # fmt: skip
    print(inv.groupby(["tensor_parallel", "microbatch_size"]).floor.agg(["count", "max"])
          .round(3).to_string())  # fmt: skip
    if args.predictions:
        print("== what-if: the rows' data-parallel term as a ring over the same table (%)")
        print(what_if(args.predictions, lut).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
