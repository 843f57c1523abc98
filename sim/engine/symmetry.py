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
full one. Expert and context parallelism: the replicas are the ``dp x cp`` data- and context-parallel
ranks (:mod:`sim.engine.groups`); every context rank and every rank of an expert-parallel group
runs the same program (Megatron balances the causal attention over the context ranks, and the
router's load is the same on every rank of a group, :mod:`sim.compute.routing`), so replica 0
stands for them too. Under MoE parallel folding (:mod:`sim.parallel.folding`) the simulated
rank's expert group spans tensor ranks (``etp < t``) or its experts' tensor group spans
replicas (``etp > t``): every member still runs the same program, each folded group joins with
its simulated members only (:meth:`HeldLinks.members`), and the checks below walk the folded
groups (``tests/test_symmetry.py``: the full simulation's time, peak and traffic, exactly).

The checks, each cheap enough for 16,384 GPUs (linear in GPUs and links):

* an expert- or context-parallel exchange (all-to-all, ring, all-gather) of the simulated
  ranks' groups that goes through a host (PCIe switch to socket, QPI): other groups' exchanges
  share it. An exchange within a group runs over all of the group's GPUs, as a data-parallel
  collective does (:mod:`sim.engine.groups`): the other members run the same program at the
  same moment, so the simulated member does not wait for them;
* a straggler (:attr:`SimInput.stragglers`) among the job's GPUs;
* a memory plan of some replica or tensor rank that differs from replica 0's tensor rank 0's
  for the same stage (non-uniform stages across replicas);
* a plan that moves data off its GPU (host offload, swaps, chunk fetches, write-backs, step
  copies, host DRAM): those copies share PCIe switches, sockets and the host DRAM pool between
  replicas, which the mirror would not count;
* a GPU (model, memory, speeds, host socket's overhead) or the links touching it (each
  direction's bandwidth, NCCL rate, latency, kind) unlike its counterpart in replica 0 / tensor
  rank 0: a degraded or missing link, a different GPU;
* a stage-boundary send of the simulated ranks that goes through a host (PCIe switch to socket,
  QPI): another replica's sends and copies could share it, and the mirror would miss that load.
  A send that crosses a link between two switches (a leaf's uplink in a fat tree) is mirrored,
  with a note (:func:`fabric_note`): the other replicas' sends over that link at the same
  moment are not counted there (an assumption; the data-parallel collectives, the bulk of
  the traffic between servers, hold every member's links). Likewise an expert- or
  context-parallel exchange that crosses a link between switches (an all-to-all across rails
  through a spine): the other groups' exchanges over it at the same moment are not counted.

Not checked (an assumption): servers wired differently whose GPUs still have identical links,
and contention between the data-parallel collectives of different tensor ranks (each tensor
rank's communicator runs on its own rail in a rail-optimised network; the engine times rank
0's). Where a full simulation runs (up to 64 GPUs), the tests compare both: the same iteration
time and peak memory, exactly, with data or tensor parallelism or both, interleaved stages,
ZeRO-3 and blocking sends (``tests/test_symmetry.py``). Collectives of different communicators
share network and NVLink links (max-min fair, :mod:`sim.engine.links`): per link the same
flows in every replica, so the full run of alike replicas is symmetric itself. (Under FIFO
links, with tensor and data parallelism and buckets overlapping the backward, a bucket's
all-reduce started when the last replica's tensor-parallel all-reduce freed its port and the
replicas' pipeline sends shared the bucket's NICs or not by the order of events in one
instant: full over mirrored -0.53 % on 8 DGX A100, t 2, p 4, w 8, pipesim's buckets; now
0.11525 s both. Llama-3.1-8B TP 2 + FSDP2: +9 % at 16 H100, +41 % at 64; now equal,
``tests/test_fair_share.py``.) An expert-parallel group whose all-to-alls
cross the spine, beside the pipeline's sends over the same NICs: the full simulation's members
joined a little apart under FIFO links (6.4e-5 of the iteration, not re-measured since,
DeepSeek-V3 trimmed to 16 layers under DualPipeV on 64 H100s with EP 32 over four servers,
``experiments/deepseek-v3-dualpipe-overlap.yaml`` at 32 micro-batches); within one server, or
across servers without spine crossings, the mirror equals it (``tests/test_symmetry.py``).
"""

from __future__ import annotations

from dataclasses import fields, replace

from sim.comm.hierarchical import CollectivePlan
from sim.engine.inputs import SimInput
from sim.hardware.parts import GPU, Link
from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.parallel.folding import expert_group, expert_tp_group, folds


def asymmetry(inp: SimInput) -> str | None:
    """Why ``inp`` cannot be simulated mirrored (module doc), or None when it can.

    Returns:
        A short reason, e.g. ``"a straggler GPU (gpu5 x1.3)"``; None also when there is
        nothing to mirror (one replica and one tensor rank).
    """
    job = _job_gpus(inp)
    slow = [(g, f) for g, f in inp.stragglers if g in job and f != 1.0]
    if slow:
        return f"a straggler GPU (gpu{slow[0][0]} x{slow[0][1]:g})"
    return (
        _plan_asymmetry(inp) or _gpu_asymmetry(inp) or _send_asymmetry(inp) or _group_asymmetry(inp)
    )


def mirrored(inp: SimInput) -> tuple[SimInput, str | None]:
    """``(inp mirrored, note)`` when :func:`asymmetry` finds nothing (``note``: what the mirror
    leaves out, :func:`fabric_note`, or None), else ``(inp, "full simulation: <reason>")``.
    With one replica and one tensor rank ``inp`` is returned as it is."""
    why = asymmetry(inp)
    if why is not None:
        return inp, f"full simulation: {why}"
    if inp.dp_width == 1 and inp.tensor_parallel == 1:
        return inp, None
    return replace(inp, mirrored=True), fabric_note(inp)


def fabric_note(inp: SimInput) -> str | None:
    """The assumption a mirrored run makes when a stage-boundary send of the simulated ranks
    crosses a link between two switches (a leaf's uplink to a spine): the other replicas'
    sends at the same moment may cross it too, and their load is not counted there (the
    data-parallel collectives, which hold every member's links, are). None when no send does."""
    for src, dst, lk in _foreign_hops(inp):
        return (
            f"mirrored: the send {src}->{dst} crosses {lk.name} between switches; other "
            "replicas' sends over it are not counted (an assumption)"
        )
    for group, src, dst, lk in _group_hops(inp):
        if not (_is_gpu(lk.src) or _is_gpu(lk.dst)):
            return (
                f"mirrored: the {group} exchange {src}->{dst} crosses {lk.name} between "
                f"switches; other {group} groups' exchanges over it are not counted (an "
                "assumption)"
            )
    return None


class HeldLinks:
    """The links a collective holds in one run: all of its plan's, or, mirrored, those that
    touch a simulated GPU or no GPU at all (switch to switch); memoised per plan.

    A link that touches another replica's (tensor rank's) GPU carries, at every moment, what
    the matching link of the simulated GPU carries (the same program runs there), so waiting
    for the simulated one is waiting for it; holding it as well would leave it free of that
    replica's own sends and collectives, which are not simulated, and let the collective pass
    ahead of them. Links between switches (a fabric's) are held as they are: every
    communicator's collective over them runs in the simulation (sends over them: :func:`fabric_note`).

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
            held = self._memo[plan.names] = self.of(plan.links)
        return held

    def of(self, links: tuple[Link, ...]) -> tuple[Link, ...]:
        """Of ``links`` (an exchange's, :mod:`sim.engine.groups`), those to hold (not memoised:
        the caller caches per exchange)."""
        if not self.inp.mirrored:
            return links
        mine = self.inp.simulated_gpus
        return tuple(
            lk
            for lk in links
            if lk.src in mine or lk.dst in mine or not (_is_gpu(lk.src) or _is_gpu(lk.dst))
        )

    def members(self, replicas: tuple) -> int:
        """How many of ``replicas`` (a group's: replica indices, or ``(replica, tensor rank)``
        pairs of a folded expert group) the run simulates: each one joins."""
        if not self.inp.mirrored:
            return len(replicas)
        inp = self.inp
        return sum(
            m < inp.simulated_replicas
            if isinstance(m, int)
            else m[0] < inp.simulated_replicas and m[1] < inp.simulated_tensor_ranks
            for m in replicas
        )


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
        if ref.off_gpu:
            return f"stage {s}'s memory plan moves data off its GPU (host or peer copies)"
        for r in range(inp.dp_width):
            for k in range(inp.tensor_parallel):
                if _plan(inp, r, s, k) != ref:
                    return f"stage {s} has another memory plan on replica {r} tensor rank {k}"
    return None


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


_GPU_FIELDS = tuple(f.name for f in fields(GPU) if f.name not in ("name", "host"))


def _gpu_key(gpu: GPU, hosts: dict[str, tuple]) -> tuple:
    """What the engine uses of ``gpu`` besides its name: its description (every field but
    its and its host's names) and its socket's ``(host overhead, Adam rate)`` (``hosts`` by
    socket name)."""
    return (*(getattr(gpu, f) for f in _GPU_FIELDS), hosts[gpu.host])


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
    """A send of the simulated ranks through a host (PCIe switch to socket, QPI): the path
    other replicas' sends and copies share inside a server."""
    hosts = {h.name for h in inp.topology.hosts}
    for src, dst, lk in _foreign_hops(inp):
        if lk.src in hosts or lk.dst in hosts:
            return f"the send {src}->{dst} crosses {lk.name}, which other replicas share"
    return None


def _group_asymmetry(inp: SimInput) -> str | None:
    """An expert- or context-parallel exchange of the simulated ranks' groups through a host
    (PCIe switch to socket, QPI): the path other groups' exchanges share inside a server."""
    hosts = {h.name for h in inp.topology.hosts}
    for group, src, dst, lk in _group_hops(inp):
        if lk.src in hosts or lk.dst in hosts:
            return f"the {group} exchange {src}->{dst} crosses {lk.name}, which other groups share"
    return None


def _simulated_groups(inp: SimInput) -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
    """``(group, members)`` of the simulated rank's (replica 0, tensor rank 0) context-,
    expert- and expert-tensor-parallel groups, members as ``(replica, tensor rank)``: the
    ``cp`` or ``ep`` consecutive replicas of tensor rank 0, or under MoE parallel folding the
    folded expert mesh's groups (:mod:`sim.parallel.folding`), as :mod:`sim.engine.groups`
    runs them."""
    lay, out = inp.layout, []
    if lay.cp > 1:
        out.append(("cp", tuple((r, 0) for r in range(lay.cp))))
    if lay.ep > 1:
        folded = lay.etp is not None
        out.append(
            ("ep", expert_group(lay, 0, 0) if folded else tuple((r, 0) for r in range(lay.ep)))
        )
    if lay.etp is not None and folds(lay) and lay.expert_tp > 1:
        out.append(("etp", expert_tp_group(lay, 0, 0)))
    return tuple(out)


def _group_hops(inp: SimInput):
    """``(group, src, dst, link)`` for each link between two members of the simulated rank's
    expert-, expert-tensor- or context-parallel groups (:func:`_simulated_groups`, every stage)
    that touches neither of the two GPUs (every pair: an all-to-all's routes; the rings' hops
    are among them)."""
    topo = inp.topology
    for group, members in _simulated_groups(inp):
        for s in range(inp.stages):
            gpus = [f"gpu{inp.gpu_index(r, s, k)}" for r, k in members]
            for src in gpus:
                for dst in gpus:
                    if src == dst:
                        continue
                    for lk in topo.route(src, dst):
                        if lk.src not in (src, dst) and lk.dst not in (src, dst):
                            yield group, src, dst, lk


def _foreign_hops(inp: SimInput):
    """``(src, dst, link)`` for each link of a stage-boundary send of the simulated ranks
    that touches neither of its two GPUs."""
    topo = inp.topology
    for s in range(inp.stages - 1):
        a, b = f"gpu{inp.gpu_index(0, s, 0)}", f"gpu{inp.gpu_index(0, s + 1, 0)}"
        if a == b:
            continue
        for src, dst in ((a, b), (b, a)):
            for lk in topo.route(src, dst):
                if lk.src not in (a, b) and lk.dst not in (a, b):
                    yield src, dst, lk
