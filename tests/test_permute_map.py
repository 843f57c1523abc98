"""Transformer Engine's row maps before the fused permutation and the chunk sort
(sim.compute.permute_map): bytes by hand, and which dispatchers run them."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.moe import moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.compute.permute_map import chunk_sort_map, row_id_map


def test_row_map_bytes_by_hand():
    # r = 2 tokens, E = 3 experts: pass 1 reads 6 bools and writes 6 int32 (30 B), pass 2
    # reads and writes 6 int32 (48 B), pass 3 reads 6 and writes 2 x (2*3 + 1) int32 (80 B)
    assert [k.bytes for k in row_id_map(2, 3)] == [30.0, 48.0, 80.0]
    assert chunk_sort_map("sort_by_expert", 10).bytes == 40.0


def test_alltoall_runs_them_hybridep_does_not():
    a2a = MoEShape(64, 8, 2, 32, sort_by_expert=True)
    names = [k.name for k in moe_fwd(a2a, 16, 16, (4.0,) * 4, 2)]
    maps = [n for n in names if n.endswith("]") and ("row_id" in n or n.endswith("[map]"))]
    assert maps == ["permute[row_id_pass1]", "permute[row_id_pass2]", "permute[row_id_pass3]",
                    "sort_by_expert[map]", "unsort_by_expert[map]"]  # fmt: skip
    # each map before the kernel that reads it
    assert names.index("permute[row_id_pass3]") < names.index("permute")
    assert names.index("unsort_by_expert[map]") + 1 == names.index("unsort_by_expert")
    one_expert = [k.name for k in moe_fwd(a2a, 16, 16, (4.0,), 2)]  # no chunk sort
    assert not [n for n in one_expert if n.endswith("[map]")]
    hybrid = replace(a2a, sort_by_expert=False, hybridep=True)
    assert not [k for k in moe_fwd(hybrid, 16, 16, (4.0,) * 4, 2) if "row_id" in k.name]
