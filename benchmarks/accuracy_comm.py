"""Communication accuracy: pipesim's predicted p2p and all-reduce bus bandwidth against
nccl-tests measurements by others.

Measured (``validation/galvatron/{p2p,allreduce}_bandwidth_1nodes_8gpus_per_node.json``,
PKU-DAIR/Hetu-Galvatron, Apache-2.0): ``GalvatronProfiler.profile_bandwidth`` runs nccl-tests
``sendrecv_perf`` and ``all_reduce_perf`` from 16 MB to 512 MB (factor 2) on the first group of
each kind and keeps nccl-tests' "Avg bus bandwidth" in GB/s:

* ``pp_size_n``: ``sendrecv_perf`` on ranks ``range(0, 8, 8 // n)`` (every rank sends to the
  next one; busbw = algbw);
* ``allreduce_size_n_consec_c``: ``all_reduce_perf`` on ranks ``0..n-1`` (``c = 1``) or
  ``range(0, 8, 8 // n)`` (``c = 0``); busbw = algbw * 2(n-1)/n.

Predicted: :mod:`sim.engine.microbench` on a preset (the engine's routes, links, ring and NCCL
rates), mean busbw over 64, 128, 256 and 512 MiB (nccl-tests' ``M`` is MiB; the measured average
also holds 16 and 32 MB).

Which GPU: the files do not say. **The GPU is inferred, not stated**: an 8-GPU NVSwitch node
whose NVLink gives 200 GB/s per direction, i.e. A800-SXM4 (the A100 with 8 instead of 12
NVLinks, 400 GB/s bidirectional; preset ``hgx-a800-80gb``). Why: NCCL moves 20 GB/s per
NVLink on Ampere (NCCL ``src/graph/topo.h``; SM copies of 128-byte payloads, NVIDIA/nccl-tests
#149), so a DGX A100 (12 NVLinks) gives ~230-240 GB/s busbw, which NVIDIA measures
(nccl-tests#149, #189) and these files do not (138-164 GB/s); 8 NVLinks give 160 GB/s. Galvatron
is from Peking University; the A800 is the A100 variant NVIDIA sells in China since the US export
rules of late 2022 (tweakers.net/nieuws/203182, after Reuters), and Galvatron's docs report
A100-class clusters. An H800 (also 200 GB/s NVLink) would fit the bandwidths too; the bf16
Llama profiles beside these files do not tell the two apart, so the A800 is an inference. The DGX A100 rows are kept for comparison; of
all 8-GPU presets the A800 one is the closest (:func:`closest_preset`). No constant is fitted
to these files: the A800 preset is the A100's GA100 with the A800's link count, and the NCCL
rate is NCCL's own number.

Known gap: the p2p rate falls as more pairs send at once (164 / 139 / 109 GB/s for 2 / 4 / 8
ranks). The model has no shared link there (NVSwitch: every pair has its own links), so it
predicts ~158 GB/s for all three: pp_size_4 is within 15 % (+14 %), pp_size_8 is not (+45 %).
NCCL does give each p2p peer fewer channels as the communicator grows (``src/enqueue.cc``:
``nChannelsMax`` halves while ``nChannelsMax * nRanks > 4 * p2pnChannels``), but how much
bandwidth a channel carries is not published, so that mechanism is not modelled; fitting it to
pp_size_8 would be fitting to the data under test.

Reference points (:data:`REFERENCES`): the same NCCL rate checked on other hardware against
published 8-/16-GPU all-reduce busbw at large sizes (1-8 GiB). On NVSwitch presets the
communicator has one ring at its port's rate; on the DGX-1 cube mesh it has NCCL's several rings
over all 6 NVLinks of each GPU (:func:`sim.hardware.rings.ring_set`: 40 + 40 + 20 + 20 = 120
GB/s, -8 % against 130 GB/s; one ring gave 40 GB/s, -69 %).

Run: ``PYTHONPATH=$PWD python benchmarks/accuracy_comm.py`` from a checkout (the venv's
installed ``sim`` may be another checkout's). ``rows()`` returns the Galvatron table as dicts,
``reference_rows()`` the reference points.
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
GiB = 2**30
SIZES = (64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB)
LARGE_SIZES = (1 * GiB, 2 * GiB, 4 * GiB, 8 * GiB)
"""Sizes of the reference points: where NVIDIA says busbw has reached its plateau (nccl-tests
#149: "At 512M the bandwidth is still increasing ... replace 1G by 8G")."""
INFERRED_PRESET = "hgx-a800-80gb"
"""The hardware the Galvatron files fit (inferred, not stated: see the module doc)."""
A100_PRESET = "dgx-a100-40gb"
"""What Galvatron's docs suggest (cost-model errors "tested on an A100 cluster"; the bf16
profiles exclude V100); kept in the table for comparison."""
BOUND = 0.15
"""Issue 12: predicted bandwidth within 15 % of the measurement."""
REFERENCES = (
    (
        A100_PRESET,
        8,
        230.0,
        "NVIDIA/nccl-tests#149 (sjeaugey, NVIDIA): 8x A100 all-reduce 'should reach 230 GB/s'",
    ),
    (
        "dgx-h100",
        8,
        370.0,
        "NVIDIA/nccl#2140: 8x H100 all-reduce busbw 370 GB/s with NVLS off (user report)",
    ),
    (
        "dgx2-v100",
        16,
        120.0,
        "NVIDIA/nccl#258 (sjeaugey): DGX-2 NVSwitch 'a consistent 120 GB/s from 2 to 16 GPUs'",
    ),
    (
        "dgx1-v100-16gb",
        8,
        130.0,
        "NVIDIA/nccl#258: 8x V100 on NVLink (DGX-1 cube mesh) all-reduce busbw 130 GB/s "
        "(user report; NCCL confirms NVLink beats NVSwitch at 8 GPUs)",
    ),
)
"""``(preset, GPUs, measured all-reduce busbw GB/s, source)``: published NCCL numbers on other
hardware, independent of the Galvatron files."""


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


def _predict(
    preset: str, quantity: str, ranks: tuple[int, ...], sizes: tuple[int, ...] = SIZES
) -> float:
    """Predicted busbw in GB/s, the mean over ``sizes`` (bytes)."""
    topo = _topology(preset)
    gpus = tuple(f"gpu{r}" for r in ranks)
    fn = sendrecv_busbw_Bps if quantity == "p2p" else allreduce_busbw_Bps
    return sum(fn(topo, gpus, b) for b in sizes) / len(sizes) / 1e9


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
    """The comparison on the inferred hardware, on DGX A100 and, if another, the closest
    preset.

    Keys: ``quantity`` (``p2p``/``allreduce``), ``key`` (the file's key), ``ranks``,
    ``preset``, ``measured_GBps``, ``predicted_GBps``, ``error`` (predicted / measured - 1),
    ``within_bound`` (``|error| <= 15 %``).
    """
    presets = dict.fromkeys([INFERRED_PRESET, A100_PRESET, closest_preset()])
    return [r for preset in presets for r in preset_rows(preset)]


def reference_rows() -> list[dict]:
    """Each :data:`REFERENCES` point against the preset's predicted all-reduce busbw over
    ranks ``0..n-1`` (mean over :data:`LARGE_SIZES`). Keys: ``preset``, ``gpus``,
    ``measured_GBps``, ``predicted_GBps``, ``error``, ``within_bound``, ``source``."""
    out = []
    for preset, n, measured, source in REFERENCES:
        predicted = _predict(preset, "allreduce", tuple(range(n)), LARGE_SIZES)
        err = predicted / measured - 1.0
        out.append(
            {
                "preset": preset,
                "gpus": n,
                "measured_GBps": measured,
                "predicted_GBps": predicted,
                "error": err,
                "within_bound": abs(err) <= BOUND,
                "source": source,
            }
        )
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
    print(
        f"\nGPU inferred, not stated: {INFERRED_PRESET} (see the module doc); closest preset: "
        f"{closest_preset()}\n"
    )
    print("All-reduce busbw at 1-8 GiB against published NCCL numbers on other hardware:")
    for r in reference_rows():
        print(
            f"{r['preset']:15s} {r['gpus']:2d} GPUs {r['measured_GBps']:7.1f} "
            f"{r['predicted_GBps']:7.1f} {r['error']:+7.1%}"
            + ("" if r["within_bound"] else "  > 15 %")
            + f"  {r['source']}"
        )


if __name__ == "__main__":
    main()
