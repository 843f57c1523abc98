"""Chunks (PatrickStar, memory.md §5.4): packing parameters and Belady (OPT) eviction.

Parameters are packed, in layer order, into fixed-size chunks of ``chunk_elems`` elements; a
chunk is the unit that moves between host and GPU. A forward touches a stage's chunks in
ascending order, a backward in descending order. With room for ``capacity`` chunks on the GPU,
a missing chunk is fetched and, when the GPU is full, the resident chunk whose next use is
farthest in the future is evicted (Belady's OPT, which PatrickStar's
``LatestAccessChunkEvictionPolicy`` implements from the warm-up trace); ties (e.g. chunks never
used again) go to the lowest chunk id, as PatrickStar's priority queue does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

NEVER = math.inf


@dataclass(frozen=True)
class BeladyResult:
    """What a cache did over an access sequence.

    Attributes:
        misses: positions (indices into the sequence) that had to fetch their chunk.
        evictions: ``(position, chunk)`` for every eviction, in order.
    """

    misses: tuple[int, ...]
    evictions: tuple[tuple[int, int], ...]


def next_uses(accesses: Sequence[int]) -> list[float]:
    """For each position, the next position that accesses the same chunk (``inf``: never)."""
    nxt: list[float] = [NEVER] * len(accesses)
    last: dict[int, int] = {}
    for i in range(len(accesses) - 1, -1, -1):
        nxt[i] = last.get(accesses[i], NEVER)
        last[accesses[i]] = i
    return nxt


def belady(accesses: Sequence[int], capacity: int) -> BeladyResult:
    """Simulate a cache of ``capacity`` chunks under OPT eviction over ``accesses``.

    The victim comes from a heap keyed ``(-next use, chunk id)`` (farthest next use, then
    lowest id); an entry is stale once its chunk was evicted or used again, and skipped:
    ``O(n log n)`` for ``n`` accesses instead of a scan of the cache per eviction.

    Raises:
        ValueError: ``capacity < 1``.
    """
    if capacity < 1:
        raise ValueError(f"a chunk cache needs room for at least 1 chunk, got {capacity}")
    nxt = next_uses(accesses)
    cache: dict[int, float] = {}
    heap: list[tuple[float, int]] = []
    misses, evictions = [], []
    for i, chunk in enumerate(accesses):
        if chunk not in cache:
            misses.append(i)
            if len(cache) >= capacity:
                while True:
                    neg_use, victim = heapq.heappop(heap)
                    if cache.get(victim) == -neg_use:
                        break
                del cache[victim]
                evictions.append((i, victim))
        cache[chunk] = nxt[i]
        heapq.heappush(heap, (-nxt[i], chunk))
    return BeladyResult(tuple(misses), tuple(evictions))


def chunk_count(params: float, chunk_elems: int) -> int:
    """Chunks needed for ``params`` parameters packed in order with no gaps (at least 1)."""
    return max(1, math.ceil(params / chunk_elems))


def pack(groups: Sequence[float], chunk_elems: int) -> list[float]:
    """Elements used in each chunk when parameter ``groups`` (elements, in registration order)
    are packed as PatrickStar packs them: a group goes into the last chunk if it fits in what
    is left there, else into a new chunk (``client.append_tensor``: ``try_insert_tensor_list``
    on ``last_chunk_id``, then ``new_chunk``; ``Chunk.can_fit``); earlier chunks are never
    revisited, so a chunk's tail stays empty when the next group does not fit in it.

    Raises:
        ValueError: a group larger than a chunk (PatrickStar raises "Overall size of param
            list is larger than the default chunk size").
    """
    used, _ = pack_owned([(0, g) for g in groups], chunk_elems)
    return used or [0.0]


def pack_owned(
    groups: Sequence[tuple[int, float]], chunk_elems: int
) -> tuple[list[float], list[set[int]]]:
    """:func:`pack` of ``(owner, elements)`` groups: the elements used in each chunk and the
    owners (a layer's index, say) whose groups each chunk holds; both empty without groups.

    Raises:
        ValueError: a group larger than a chunk (as :func:`pack`).
    """
    used: list[float] = []
    owners: list[set[int]] = []
    for owner, g in groups:
        if g > chunk_elems:
            raise ValueError(
                f"a parameter group of {g:.0f} elements does not fit in a chunk of "
                f"{chunk_elems} elements"
            )
        if used and used[-1] + g <= chunk_elems:
            used[-1] += g
            owners[-1].add(owner)
        else:
            used.append(g)
            owners.append({owner})
    return used, owners


def utilization(used: Sequence[float], chunk_elems: int) -> float:
    """Share of the chunks' capacity that parameters fill (PatrickStar's chunk-size search
    reports it, ``client.get_overall_chunk_size``; ``examples/eval_chunk_size.py``)."""
    return sum(used) / (len(used) * chunk_elems)


def access_sequence(order: Sequence[str], chunks: int) -> tuple[list[int], list[str]]:
    """Chunk accesses of a stage's ops: F ascending, B/I descending (W touches no weights
    again in this model). Returns the chunk ids and, per access, the op letter."""
    seq: list[int] = []
    ops: list[str] = []
    for op in order:
        if op == "F":
            ids = range(chunks)
        elif op in ("B", "I"):
            ids = range(chunks - 1, -1, -1)
        else:
            continue
        seq.extend(ids)
        ops.extend(op for _ in ids)
    return seq, ops


def steady_misses(order: Sequence[str], chunks: int, capacity: int) -> tuple[int, int]:
    """``(misses in forwards, misses in backwards)`` over one iteration in steady state.

    The iteration's accesses are simulated twice in a row and the second copy is counted, so
    the cache starts as the previous iteration left it.
    """
    seq, ops = access_sequence(order, chunks)
    if capacity >= chunks or not seq:
        return 0, 0
    res = belady(seq + seq, capacity)
    second = [i - len(seq) for i in res.misses if i >= len(seq)]
    fwd = sum(1 for i in second if ops[i] == "F")
    return fwd, len(second) - fwd
