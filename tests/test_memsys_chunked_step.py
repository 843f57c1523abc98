"""PatrickStar's host step chunk by chunk (``StagePlan.host_step_chunks``,
``MemoryTraffic.chunked_step``; Tencent/PatrickStar@2384535 ``fp16_cpu_adam.py`` 336-467):
two ranks sharing one CPU-Adam pool, or each on its own half of its threads
(``StagePlan.host_optimizer_thread_share``, PatrickStar's ``OMP_NUM_THREADS = cores /
GPU_NUM``), worked by hand."""

from types import SimpleNamespace

import pytest
import simpy

from sim.engine.traffic import MemoryTraffic
from sim.memory.chunk_step import own_threads_wait_s
from sim.memory.plan import StagePlan, Transfer


class _Links:
    """Each copy moves at 1 byte/s on its own route; the pool is one FIFO resource."""

    def __init__(self, env: simpy.Environment):
        self.env, self.events, self._res = env, [], {}

    def resource(self, name: str) -> simpy.Resource:
        return self._res.setdefault(name, simpy.Resource(self.env, capacity=1))

    def transfer(self, src, dst, nbytes, kind, name, stream, **tags):
        start = self.env.now
        yield self.env.timeout(nbytes)
        self.events.append((src, dst, start, self.env.now))
        return start


def _rank(gpu: str, chunks: int, threads: float = 1.0) -> SimpleNamespace:
    plan = StagePlan(
        host_optimizer_thread_share=threads,
        act_bytes=0.0,
        resident_act_bytes=0.0,
        host_optimizer_s=4.0,  # 2 s of CPU Adam per chunk
        host_optimizer_pool="server0",
        host_step_chunks=chunks,
        step_transfers_before=(Transfer(gpu, "cpu0", 2.0, "grads"),),  # 1 s per chunk
        step_transfers_after=(Transfer("cpu0", gpu, 2.0, "weights"),),  # 1 s per chunk
    )
    return SimpleNamespace(plan=plan, host="cpu0", stage=0, replica=int(gpu[-1]), tp_rank=0)


def _ends(chunks: int, threads: float = 1.0) -> list[float]:
    env = simpy.Environment()
    traffic = MemoryTraffic(env, _Links(env), None, None, 1)  # type: ignore[arg-type]
    ranks = [_rank(g, chunks, threads) for g in ("gpu0", "gpu1")]
    done = [env.process(traffic.chunked_step(r, {})) for r in ranks]
    ends: list[float] = []
    for p in done:
        p.callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    return ends


def test_chunks_interleave_in_the_pool_while_the_other_rank_copies() -> None:
    """Per chunk: 1 s down, 2 s of Adam, 1 s up. Rank 0: down 0-1, Adam 1-3, up 3-4, down 4-5,
    Adam 5-7, up 7-8. Rank 1: down 0-1, waits, Adam 3-5, up 5-6, down 6-7, Adam 7-9, up 9-10.
    One chunk (whole-state copies around one pool turn): rank 0 ends at 2 + 4 + 2 = 8, rank 1
    waits for the pool until 6 and ends at 12."""
    assert _ends(2) == [8.0, 10.0]
    assert _ends(1) == [8.0, 12.0]


def test_own_threads_step_at_their_share_beside_the_other_rank() -> None:
    """Each rank on half of the threads: per chunk 1 s down, 2 s of work at half the rate
    (4 s), 1 s up, beside the other rank, no queue: both end at 2 x (1 + 4 + 1) = 12 s
    (one chunk: 2 + 8 + 2 = 12 s too). The planner's estimate of the time beyond the rank's
    serial path (copies and 4 s of CPU Adam at the whole rate) is the other 4 s; a rank alone
    on its server, none."""
    assert _ends(2, threads=0.5) == [12.0, 12.0]
    assert _ends(1, threads=0.5) == [12.0, 12.0]
    assert own_threads_wait_s(4.0, 2) == pytest.approx(4.0)
    assert own_threads_wait_s(4.0, 1) == 0.0
    with pytest.raises(ValueError):
        StagePlan(act_bytes=0.0, resident_act_bytes=0.0, host_optimizer_thread_share=0.0)
