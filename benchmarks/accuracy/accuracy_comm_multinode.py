"""Multi-node all-reduce: pipesim's NCCL model against published nccl-tests figures.

Data: ``measurements/nccl-tests/allreduce_multinode.csv`` (provenance in the README beside it):
``measured`` rows are nccl-tests ``all_reduce_perf`` lines (out-of-place time and busbw)
published by others; ``expected`` rows are what NVIDIA's NCCL engineers said the hardware
should reach at large sizes (per-NIC figures times the NICs of a server: NCCL's ring crosses
every NIC of a server once per step, so the bus bandwidth of a multi-node ring is the
server's NCCL NIC rate; NVIDIA/nccl-tests#119 "24GB/s is the peak performance per 200G NIC",
#290 "For NDR @ 400Gbps you should see 46-48GB/s per NIC", with ``NCCL_ALGO=RING``).

Predicted: the members' :class:`~sim.comm.hierarchical.CollectivePlan` on the row's preset
(``Nx-PRESET``: the rail-optimised fat tree of :mod:`sim.hardware.fabric`), NCCL's choice of
algorithm and protocol (:func:`sim.comm.nccl.choose`) or, where the row forced
``NCCL_ALGO=RING``, the fastest ring protocol; busbw = ``bytes / time * 2 (n - 1) / n``
(nccl-tests ``doc/PERFORMANCE.md``). pipesim has one NIC per GPU; a server whose ``G`` GPUs
share each NIC (``gpus_per_nic``) is modelled with per-GPU NICs of ``1/G`` the preset's rate
(the same bandwidth per server; an assumption: NCCL's channels share the NIC's rate evenly).
Nothing is fitted to these rows.

Run: ``PYTHONPATH=$PWD python benchmarks/accuracy/accuracy_comm_multinode.py``.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from sim.comm import nccl
from sim.comm.hierarchical import collective_plan
from sim.events import EventKind
from sim.hardware.loader import load_hardware, load_hardware_spec
from sim.hardware.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "measurements" / "nccl-tests" / "allreduce_multinode.csv"
FIELDS = ("source", "kind", "gpu", "servers", "gpus_per_server", "nics_per_server", "preset")
FIELDS += ("gpus_per_nic", "algo", "nccl", "bytes", "time_us", "busbw_GBps", "url")


def read_rows(path: Path = DATA) -> list[dict]:
    """The CSV's rows as dicts (strings).

    Raises:
        ValueError: a column of :data:`FIELDS` is missing, or a row lacks its URL or busbw.
    """
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    missing = [f for f in FIELDS if rows and f not in rows[0]]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    for i, r in enumerate(rows):
        if not r["url"].startswith("https://") or not r["busbw_GBps"]:
            raise ValueError(f"{path}: row {i + 2} lacks its url or busbw_GBps")
    return rows


@cache
def topology(preset: str, gpus_per_nic: int) -> Topology:
    """``preset`` with each GPU's NIC at ``1 / gpus_per_nic`` of its rate (module doc)."""
    if gpus_per_nic == 1:
        return load_hardware(preset)
    net = load_hardware_spec(preset).network
    assert net is not None, preset
    share = {
        "nic_bandwidth": net.nic_bandwidth / gpus_per_nic,
        "nccl_nic_bandwidth": (net.nccl_nic_bandwidth or net.nic_bandwidth) / gpus_per_nic,
    }
    return load_hardware(
        {"base": preset, "name": f"{preset}-nic-1of{gpus_per_nic}", "network": share}
    )


def predict(row: dict) -> tuple[float, str]:
    """Predicted ``(busbw GB/s, algorithm/protocol)`` of one row."""
    topo = topology(row["preset"], int(row["gpus_per_nic"]))
    n = int(row["servers"]) * int(row["gpus_per_server"])
    plan = collective_plan(topo, tuple(f"gpu{g}" for g in range(n)))
    nbytes = float(row["bytes"])
    if row["algo"] == "ring":
        comm = plan.communicator(EventKind.ALLREDUCE)
        assert comm is not None
        cands = [
            c for c in nccl.candidates(comm, EventKind.ALLREDUCE, nbytes) if c.algorithm == "ring"
        ]
        choice = min(cands, key=lambda c: c.time_s)
    else:
        choice = plan.choice(nbytes, EventKind.ALLREDUCE)
        assert choice is not None
    busbw = nbytes / choice.time_s * 2 * (n - 1) / n / 1e9
    return busbw, f"{choice.algorithm}/{choice.protocol}"


def rows() -> list[dict]:
    """Each CSV row with ``predicted_GBps``, ``algorithm`` and ``error`` (predicted/measured-1)."""
    out = []
    for r in read_rows():
        busbw, algo = predict(r)
        measured = float(r["busbw_GBps"])
        out.append(dict(r, predicted_GBps=busbw, algorithm=algo, error=busbw / measured - 1))
    return out


def main() -> None:
    print(
        f"{'source':22s} {'kind':8s} {'GPUs':>5s} {'bytes':>11s} {'measured':>9s} "
        f"{'pipesim':>8s} {'algo':>15s} {'error':>7s}"
    )
    for r in rows():
        n = int(r["servers"]) * int(r["gpus_per_server"])
        print(
            f"{r['source']:22s} {r['kind']:8s} {n:5d} {int(r['bytes']):11d} "
            f"{float(r['busbw_GBps']):9.1f} {r['predicted_GBps']:8.1f} {r['algorithm']:>15s} "
            f"{r['error']:+7.1%}"
        )


if __name__ == "__main__":
    main()
