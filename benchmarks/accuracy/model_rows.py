"""Predict a few models' measured rows and write them, for before/after comparisons of one change.

``bench_measured_data.py`` over a subset: the rows of ``--source`` (default ``bridge``) whose
model name starts with one of ``--models`` (comma-separated; every row of other sources), each
predicted as that benchmark does (:func:`bench_measured_data.record`), written to ``--out`` as
CSV with the CSV row number (``row``) and ``err`` (predicted / measured - 1); prints the signed
mean and the MAPE per model. Nothing is fitted.

Run: ``PIPESIM_SHARED_DATA=../shared/data python benchmarks/accuracy/model_rows.py
--models "GPT OSS,Nemotron_3_Super" --out /tmp/rows.csv``; run it on two checkouts and join on
``row``.

``--host-as PRESET`` prices every row's host as that preset's ``host_overhead`` (an overlay
over every hardware, :class:`sim.runs.predict.Predictor`): a counterfactual that isolates what
the host pricing of each platform does (e.g. ``--host-as dgx-b200`` or ``gb200-nvl72`` for the
x86 DGX against Grace rows, ``benchmarks/accuracy/platform_pairs.py``). ``--host-set
key=value,...`` sets ``host_overhead`` keys over every hardware's own (values as a preset writes
them, ``te_module=0 us``; after ``--host-as``): e.g. the counterfactual of
``measurements/host/grace_host.md`` (``--host-set "te_module=0 us"``).

``--nccl-nic GBPS`` sets every row's network ``nccl_nic_bandwidth`` (NCCL's rate of a GPU's NIC,
GB/s) for the presets that have a network: a counterfactual that shows how much of a row's
time rides on traffic between nodes (pipeline sends and collectives alike). NCCL's 14 GB/s
(NVIDIA/nccl@5067397 ``src/graph/paths.cc`` line 918) is the rate of one p2p channel, not of a
peer: a send to another server moves at ``min(NIC, channels x 14 GB/s)``, now modelled
(:mod:`sim.comm.p2p_net`). ``--nccl-p2p-channels N`` sets NCCL's p2p channels per network peer
on every row (2: NCCL <= 2.28, which the shipped overlay ``nccl-2.28`` sets for old Bridge
releases, :mod:`sim.runs.bridge_nccl`; over a row's shipped overlay). Not model changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.bench_measured_data import DATA, RECIPES, SOURCES, read_source, record  # noqa: E402
from sim.hardware.loader import load_hardware_spec  # noqa: E402
from sim.runs.predict import Predictor  # noqa: E402


def host_overlay(host_as: str, host_set: str) -> dict | None:
    """The hardware overlay of ``--host-as`` (that preset's whole ``host_overhead``, seconds)
    and then ``--host-set`` (``"key=value,..."``, values as a preset writes them); None for
    neither.

    Raises:
        ValueError: a preset without ``host_overhead``, or an item of ``host_set`` without ``=``.

    >>> host_overlay("", "te_module=0 us, read = 5 us")
    {'host_overhead': {'te_module': '0 us', 'read': '5 us'}}
    """
    over: dict | None = None
    if host_as:
        host = load_hardware_spec(host_as).host_overhead
        if host is None:
            raise ValueError(f"{host_as} has no host_overhead")
        over = {"host_overhead": host.model_dump(exclude_unset=True)}
    for item in filter(None, (x.strip() for x in host_set.split(","))):
        if "=" not in item:
            raise ValueError(f"--host-set item {item!r} is not key=value")
        key, value = item.split("=", 1)
        over = over or {"host_overhead": {}}
        over["host_overhead"][key.strip()] = value.strip()
    return over


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="model-name prefixes, comma-separated")
    ap.add_argument("--source", default="bridge", choices=sorted(SOURCES))
    ap.add_argument("--out", required=True, help="CSV to write")
    ap.add_argument("--host-as", default="", help="price every host as this preset's")
    ap.add_argument("--host-set", default="", help="host_overhead 'key=value,...' over every host")
    ap.add_argument(
        "--nccl-nic", type=float, default=0.0, help="NCCL's NIC rate, GB/s (module doc)"
    )
    ap.add_argument(
        "--nccl-p2p-channels", type=int, default=0, help="NCCL's p2p channels per network peer"
    )
    args = ap.parse_args()
    prefixes = tuple(m for m in args.models.split(",") if m)
    try:
        over = host_overlay(args.host_as, args.host_set)
    except ValueError as e:
        sys.exit(str(e))
    if args.nccl_nic > 0:
        over = (over or {}) | {"network": {"nccl_nic_bandwidth": f"{args.nccl_nic} GB/s"}}
    if args.nccl_p2p_channels > 0:
        net = (over or {}).get("network", {}) | {
            "nccl_p2p_channels_per_peer": args.nccl_p2p_channels
        }
        over = (over or {}) | {"network": net}
    pred, recs = Predictor(over), []
    for run in read_source(args.source, DATA / SOURCES[args.source], RECIPES, 0):
        if args.source == "bridge" and prefixes and not run.name.startswith(prefixes):
            continue
        rec = record(args.source, run, pred)
        recs.append(rec | {"row": run.source.rsplit(" ", 1)[-1]})
    df = pd.DataFrame(recs)
    df["err"] = df.predicted_s / df.measured_s - 1
    df.to_csv(args.out, index=False)
    stats = df.groupby("model").err.agg(signed="mean", mape=lambda x: x.abs().mean(), rows="count")
    print(stats.to_string(float_format=lambda x: f"{x * 100:+.1f} %"))


if __name__ == "__main__":
    main()
