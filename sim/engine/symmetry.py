"""Simulate what differs, once: the data-parallel replicas and tensor ranks that run the same
program on alike GPUs are simulated as one.

Scenario: ``w`` replicas of a ``p``-stage pipeline, each stage a group of ``t`` tensor ranks,
on ``p*w*t`` GPUs. Every replica runs the same action lists with the same stage costs and
memory plans, and every tensor rank of a group the same shard, so on GPUs and links that are
alike their events repeat replica 0's, tensor rank 0's, shifted to other GPUs. The engine then
runs replica 0's tensor rank 0 only (:attr:`SimInput.mirrored <sim.engine.inputs.SimInput.
mirrored>`): ``p*v`` ranks' programs instead of ``p*w*t``, so a point costs what its pipeline
costs, not what its GPU count does. What joins the replicas is still timed on the real
topology: a data-parallel collective runs its plan over all ``w`` members (every member's
rings, NICs and switch links held for its duration, :mod:`sim.engine.collectives`), a
tensor-parallel one over all ``t`` GPUs of the group; they only wait for the simulated member
to join (the others join at the same moment, running the same program).

:func:`asymmetry` says why a configuration cannot be mirrored; the simulation is then the
full one. The checks, each cheap enough for 16,384 GPUs (linear in GPUs and links):

* expert or context parallelism (their all-to-alls and ring exchanges between replicas are
  not one replica's program): full;
* a straggler (:attr:`SimInput.stragglers`) among the job's GPUs;
* a memory plan of some replica or tensor rank that differs from replica 0's tensor rank 0's
  for the same stage (non-uniform stages across replicas);
* a plan that moves data off its GPU (host offload, swaps, chunk fetches, write-backs, step
  copies, host DRAM): those copies share PCIe switches, sockets and the host DRAM pool between
  replicas, which the mirror would not count;
* a GPU (model, memory, speeds, host socket's overhead) or the links touching it (each
  direction's bandwidth, NCCL rate, latency, kind) unlike its counterpart in replica 0 / tensor
  rank 0: a degraded or missing link, a different GPU;
* a stage-boundary send of the simulated ranks that crosses a link touching neither of its two
  GPUs (e.g. through a host socket, or between switches): another replica's sends could share
  it, and the mirror would miss that load.

Not checked (an assumption): servers wired differently whose GPUs still have identical links,
and contention between the data-parallel collectives of different tensor ranks (each tensor
rank's communicator runs on its own rail in a rail-optimised network; the engine times rank
0's). Where a full simulation runs (up to 64 GPUs), the tests compare both: same iteration
time and peak memory (``tests/test_symmetry.py``).
"""

from __future__ import annotations

from dataclasses import replace

from sim.engine.hierarchical import CollectivePlan
from sim.engine.inputs import SimInput
from sim.hardware.topology import GPU, Link, Topology
from sim.memory.plan import StagePlan


def asymmetry(inp: SimInput) -> str | None:
    """Why ``inp`` cannot be simulated mirrored (module doc), or None when it can.

    Returns:
        A short reason, e.g. ``"a straggler GPU (gpu5 x1.3)"``; None also when there is
        nothing to mirror (one replica and one tensor rank).
    """
    if inp.context_parallel > 1 or inp.expert_parallel > 1:
        return "expert or context parallelism exchanges between replicas"
    job = _job_gpus(inp)
    slow = [(g, f) for g, f in inp.stragglers if g in job and f != 1.0]
    if slow:
        return f"a straggler GPU (gpu{slow[0][0]} x{slow[0][1]:g})"
    return _plan_asymmetry(inp) or _gpu_asymmetry(inp) or _send_asymmetry(inp)


def mirrored(inp: SimInput) -> tuple[SimInput, str | None]:
    """``(inp mirrored, None)`` when :func:`asymmetry` finds nothing, else ``(inp, reason)``.
    With one replica and one tensor rank ``inp`` is returned as it is."""
    why = asymmetry(inp)
    if why is not None or (inp.dp_width == 1 and inp.tensor_parallel == 1):
        return inp, why
    return replace(inp, mirrored=True), None


class HeldLinks:
    """The links a collective holds in one run: all of its plan's, or, mirrored, those that
    touch a simulated GPU or no GPU at all (switch to switch); memoised per plan.

    A link that touches another replica's (tensor rank's) GPU carries, at every moment, what
    the matching link of the simulated GPU carries (the same program runs there), so waiting
    for the simulated one is waiting for it; holding it as well would leave it free of that
    replica's own sends and collectives, which are not simulated, and let the collective pass
    ahead of them. Links between switches carry only collectives (:func:`asymmetry` refuses
    sends across them) and are held as they are.

    Args:
        inp: the run's configuration.
    """

    def __init__(self, inp: SimInput):
        self.inp = inp
        self._memo: dict[tuple[str, ...], tuple[Link, ...]] = {}

    def __call__(self, plan: CollectivePlan) -> tuple[Link, ...]:
        """The links of ``plan`` to hold."""
        if not self.inp.mirrored:
            return plan.links
        held = self._memo.get(plan.names)
        if held is None:
            mine = self.inp.simulated_gpus
            held = self._memo[plan.names] = tuple(
                lk
                for lk in plan.links
                if lk.src in mine or lk.dst in mine or not (_is_gpu(lk.src) or _is_gpu(lk.dst))
            )
        return held


def _is_gpu(node: str) -> bool:
    return node.startswith("gpu") and node[3:].isdigit()


def _job_gpus(inp: SimInput) -> set[int]:
    return {
        inp.gpu_index(r, s, k)
        for r in range(inp.dp_width)
        for s in range(inp.stages)
        for k in range(inp.tensor_parallel)
    }


def _plan(inp: SimInput, r: int, s: int, k: int) -> StagePlan:
    return inp.tensor_plans[r][s][k] if inp.tensor_plans else inp.plans[r][s]


def _plan_asymmetry(inp: SimInput) -> str | None:
    for s in range(inp.stages):
        ref = _plan(inp, 0, s, 0)
        if _moves_off_gpu(ref):
            return f"stage {s}'s memory plan moves data off its GPU (host or peer copies)"
        for r in range(inp.dp_width):
            for k in range(inp.tensor_parallel):
                if _plan(inp, r, s, k) != ref:
                    return f"stage {s} has another memory plan on replica {r} tensor rank {k}"
    return None


def _moves_off_gpu(plan: StagePlan) -> bool:
    """Whether ``plan`` copies anything between its GPU and a host or another GPU, or keeps
    bytes in host DRAM."""
    return bool(
        plan.swap_bytes > 0
        or plan.fetch_bytes > 0
        or plan.writeback_bytes > 0
        or plan.host_bytes > 0
        or plan.host_framework_bytes > 0
        or plan.host_optimizer_s > 0
        or plan.step_transfers_before
        or plan.step_transfers_after
    )


def _gpu_asymmetry(inp: SimInput) -> str | None:
    topo = inp.topology
    links = _incident_links(topo)
    hosts = {h.name: (h.overhead, h.adam_params_per_s) for h in topo.hosts}
    for s in range(inp.stages):
        ref = inp.gpu_index(0, s, 0)
        want = (_gpu_key(topo.gpu(ref), hosts), links.get(f"gpu{ref}", ()))
        for r in range(inp.dp_width):
            for k in range(inp.tensor_parallel):
                g = inp.gpu_index(r, s, k)
                if g == ref:
                    continue
                if _gpu_key(topo.gpu(g), hosts) != want[0]:
                    return f"gpu{g} is unlike gpu{ref} (model, memory, speed or host)"
                if links.get(f"gpu{g}", ()) != want[1]:
                    return f"the links of gpu{g} are unlike those of gpu{ref} (a degraded link?)"
    return None


def _gpu_key(gpu: GPU, hosts: dict[str, tuple]) -> tuple:
    """What the engine uses of ``gpu`` besides its name: its description and its socket's
    ``(host overhead, Adam rate)`` (``hosts`` by socket name)."""
    return (replace(gpu, name="", host=""), hosts[gpu.host])


def _incident_links(topo: Topology) -> dict[str, tuple]:
    """For each GPU, the sorted ``(direction, bandwidth, NCCL rate, latency, kind)`` of the
    links that leave or enter it."""
    out: dict[str, list] = {}
    for lk in topo.links:
        desc = (lk.bandwidth_Bps, lk.nccl_bandwidth_Bps or 0.0, lk.latency_s, lk.kind)
        if _is_gpu(lk.src):
            out.setdefault(lk.src, []).append(("out", *desc))
        if _is_gpu(lk.dst):
            out.setdefault(lk.dst, []).append(("in", *desc))
    return {g: tuple(sorted(v)) for g, v in out.items()}


def _send_asymmetry(inp: SimInput) -> str | None:
    topo = inp.topology
    for s in range(inp.stages - 1):
        a, b = f"gpu{inp.gpu_index(0, s, 0)}", f"gpu{inp.gpu_index(0, s + 1, 0)}"
        if a == b:
            continue
        for src, dst in ((a, b), (b, a)):
            for lk in topo.route(src, dst):
                if lk.src not in (a, b) and lk.dst not in (a, b):
                    return f"the send {src}->{dst} crosses {lk.name}, which other replicas share"
    return None
