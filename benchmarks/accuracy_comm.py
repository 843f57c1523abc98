"""Communication accuracy: pipesim's predicted p2p and all-reduce bus bandwidth against
Galvatron's nccl-tests measurements on one 8-GPU node.

Measured (``validation/galvatron/{p2p,allreduce}_bandwidth_1nodes_8gpus_per_node.json``,
PKU-DAIR/Hetu-Galvatron, Apache-2.0): ``GalvatronProfiler.profile_bandwidth`` runs nccl-tests
``sendrecv_perf`` and ``all_reduce_perf`` from 16 MB to 512 MB (factor 2) on the first group of
each kind and keeps nccl-tests' "Avg bus bandwidth" in GB/s:

* ``pp_size_n``: ``sendrecv_perf`` on ranks ``range(0, 8, 8 // n)`` (every rank sends to the
  next one; busbw = algbw);
* ``allreduce_size_n_consec_c``: ``all_reduce_perf`` on ranks ``0..n-1`` (``c = 1``) or
  ``range(0, 8, 8 // n)`` (``c = 0``); busbw = algbw * 2(n-1)/n.

Predicted: :mod:`sim.engine.microbench` on a preset (the engine's routes, links and ring), mean
busbw over 64, 128, 256 and 512 MiB (nccl-tests' ``M`` is MiB; the measured average also holds
16 and 32 MB). The file does not name its GPU; Galvatron's docs report A100 clusters, so
``dgx-a100-40gb`` is the stated hardware, and every 8-GPU preset is scored to find the closest
one. Nothing here is fitted: presets keep their sourced numbers and the errors are reported as
they are.

Known gap (see the report): the A100 preset's NVSwitch link (265 GB/s per direction, the
effective raw-copy rate of hardware.md §6) over-predicts these files by 50-140 %. NCCL itself
reaches less than raw copies (about 80 % of line rate, NVIDIA/nccl-tests#212; 8x A100-SXM4
all-reduce busbw about 200 GB/s in NVIDIA/nccl-tests#149), and the measured 154-164 GB/s fit a
node with 200 GB/s NVLink per direction (A800-class) better than a DGX A100; the p2p decline
with more concurrent pairs (164 -> 110 GB/s) has no shared link in the model to explain it.

Run: ``python benchmarks/accuracy_comm.py``. ``rows()`` returns the table as dicts.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from sim.engine.microbench import allreduce_busbw_Bps, sendrecv_busbw_Bps
from sim.hardware.loader import list_presets, load_hardware

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "galvatron"
MiB = 2**20
SIZES = (64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB)
STATED_PRESET = "dgx-a100-40gb"
"""Galvatron's docs: cost model errors "tested on an A100 cluster"; the bf16 profiles exclude
V100 (no bf16)."""
BOUND = 0.15
"""Issue 12: predicted bandwidth within 15 % of the measurement."""


def _measurements() -> list[tuple[str, str, tuple[int, ...], float]]:
    """``(quantity, key, ranks, measured GB/s)`` from the two 8-GPU files."""
    out = []
    p2p = json.loads((DATA / "p2p_bandwidth_1nodes_8gpus_per_node.json").read_text())
    for key, gbps in p2p.items():
        n = int(key.rsplit("_", 1)[1])
        out.append(("p2p", key, tuple(range(0, 8, 8 // n)), float(gbps)))
    ar = json.loads((DATA / "allreduce_bandwidth_1nodes_8gpus_per_node.json").read_text())
    for key, gbps in ar.items():
        parts = key.split("_")
        n, consec = int(parts[2]), int(parts[4])
        ranks = tuple(range(n)) if consec else tuple(range(0, 8, 8 // n))
        out.append(("allreduce", key, ranks, float(gbps)))
    return out


@cache
def _topology(preset: str):
    return load_hardware(preset)


def _predict(preset: str, quantity: str, ranks: tuple[int, ...]) -> float:
    topo = _topology(preset)
    gpus = tuple(f"gpu{r}" for r in ranks)
    fn = sendrecv_busbw_Bps if quantity == "p2p" else allreduce_busbw_Bps
    return sum(fn(topo, gpus, b) for b in SIZES) / len(SIZES) / 1e9


def preset_rows(preset: str) -> list[dict]:
    """One row per measurement for ``preset``: measured and predicted GB/s and the error."""
    rows = []
    for quantity, key, ranks, measured in _measurements():
        predicted = _predict(preset, quantity, ranks)
        rows.append(
            {
                "quantity": quantity,
                "key": key,
                "ranks": list(ranks),
                "preset": preset,
                "measured_GBps": measured,
                "predicted_GBps": predicted,
                "error": predicted / measured - 1.0,
                "within_bound": abs(predicted / measured - 1.0) <= BOUND,
            }
        )
    return rows


@cache
def closest_preset() -> str:
    """The 8-GPU preset with the smallest mean absolute error over all measurements."""
    scores = {}
    for preset in list_presets():
        if _topology(preset).num_gpus < 8:
            continue
        rows = preset_rows(preset)
        scores[preset] = sum(abs(r["error"]) for r in rows) / len(rows)
    return min(sorted(scores), key=scores.__getitem__)


def rows() -> list[dict]:
    """The comparison for the stated hardware and, if another, the closest preset.

    Keys: ``quantity`` (``p2p``/``allreduce``), ``key`` (the file's key), ``ranks``,
    ``preset``, ``measured_GBps``, ``predicted_GBps``, ``error`` (predicted / measured - 1),
    ``within_bound`` (``|error| <= 15 %``).
    """
    out = preset_rows(STATED_PRESET)
    best = closest_preset()
    if best != STATED_PRESET:
        out += preset_rows(best)
    return out


def main() -> None:
    table = rows()
    print(
        f"{'preset':15s} {'measurement':28s} {'ranks':18s} {'measured':>9s} "
        f"{'predicted':>9s} {'error':>7s}"
    )
    for r in table:
        print(
            f"{r['preset']:15s} {r['key']:28s} {str(r['ranks']):18s} "
            f"{r['measured_GBps']:9.1f} {r['predicted_GBps']:9.1f} {r['error']:+7.1%}"
            + ("" if r["within_bound"] else "  > 15 %")
        )
    for preset in dict.fromkeys(r["preset"] for r in table):
        errs = [abs(r["error"]) for r in table if r["preset"] == preset]
        print(
            f"{preset}: mean |error| {sum(errs) / len(errs):.1%}, "
            f"{sum(e <= BOUND for e in errs)}/{len(errs)} within 15 %"
        )


if __name__ == "__main__":
    main()
