"""Time PatrickStar's backward module hooks on this host's CPU and write
``measurements/host/patrickstar_hooks.yaml`` (used by :mod:`sim.memory.chunk_hooks`).

Run from the repository root with a copy of PatrickStar's package at the A100 figure's commit
(Tencent/PatrickStar@4ef26cc, ``git archive 4ef26cc patrickstar | tar -x -C DIR``)::

    python measurements/host/patrickstar_hooks.py --patrickstar DIR

What runs is PatrickStar's own code: ``PSPreProcessCtx`` registers a stack of 64 blocks of
Hugging Face ``BertLayer``'s leaf modules (query, key, value, output dense, LayerNorm,
intermediate, output dense, LayerNorm; ``h = 64``) into chunks sized so there are 24 16-bit
chunks (with the momentum and variance chunks ``FP16Adam`` appends, 96 in the chunk list), as
GPT2_4B at 184M elements has; one forward's hooks set the tensors' states, then
``core/hook.py``'s ``pre_sub_module_backward_function`` and ``post_sub_module_backward_function``
run for every module in reverse order, timed apart, after a warm-up iteration (the memory
tracer's ``adjust_chunk_layout`` loops over the chunks only after it). Stubbed, because this
host has no GPU and one process: the chunks' device (CPU tensors, unpinned), ``torch.distributed``
(8 ranks; rank 0; ``broadcast`` and ``reduce`` do nothing), ``get_sys_memory_used`` (the memory
tracer's ``torch.cuda.memory_allocated`` and ``reset_peak_memory_stats``), the optimizer's
``check_overflow`` (priced apart, :mod:`sim.memory.chunk_hooks`) and ``psutil`` when it is not
installed. The torch ops the hooks issue (``narrow`` and ``view``, ``zeros_like``; ``copy_``,
``torch.tensor([])``) are timed alone on the same tensors and subtracted: what is left is the
hooks' Python. ``torch.cuda.memory_allocated``'s Python is timed apart: in torch 1.x it is
``memory_stats(device)["allocated_bytes.all.current"]``, which flattens the allocator's nested
statistics (8 statistics x 3 pools x 4 metrics + 2 counters = 98, pytorch/pytorch#27361) by a
recursive function, sorts them and builds an ``OrderedDict`` (torch/cuda/memory.py; the torch 1.x
form, without 2.x's ``_format_key``); the C++ that builds the nested dict is not timed (a lower
bound).

Every time is also given in units of a no-grad PyTorch op timed in the same process
(``2 * x`` on a one-element CPU tensor, the op of pytorch/pytorch#41383, 5 us there without
autograd), so that a loaded machine's slowdown cancels: the presets price a no-kernel op at
``nograd_op - launch`` (5 us), and :mod:`sim.memory.chunk_hooks` prices the hooks' Python at that
many of them. Assumption: PatrickStar's Python scales with the host as PyTorch's per-op
dispatch does; the measurement's Python (3.11) is faster than the figures' (3.8 in the NGC
21.xx images), so the counts are lower bounds.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import yaml

H, LAYERS, FP16_CHUNKS = 64, 64, 24
STATS = ("allocation", "allocated_bytes", "segment", "reserved_bytes", "active", "active_bytes",
         "inactive_split", "inactive_split_bytes")  # fmt: skip
NESTED: dict[str, Any] = {
    s: {p: dict.fromkeys(("current", "peak", "allocated", "freed"), 123456789)
        for p in ("all", "small_pool", "large_pool")} for s in STATS
}  # fmt: skip
NESTED.update(num_alloc_retries=0, num_ooms=0)


def memory_allocated_1x() -> int:
    """``torch.cuda.memory_allocated`` of torch 1.x on :data:`NESTED` (module doc)."""
    result: list[tuple[str, Any]] = []

    def _recurse_add_to_result(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            if len(prefix) > 0:
                prefix += "."
            for k, v in obj.items():
                _recurse_add_to_result(prefix + k, v)
        else:
            result.append((prefix, obj))

    _recurse_add_to_result("", NESTED)
    result.sort()
    return collections.OrderedDict(result)["allocated_bytes.all.current"]


def per_call_s(f: Any, reps: int, trials: int = 5) -> float:
    """Fastest mean seconds per call of ``f`` over ``trials`` loops of ``reps`` calls."""
    best = float("inf")
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def stub(torch: Any) -> None:
    """The stubs of the module doc (before PatrickStar is imported)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(total_memory=32 * 2**30)
    zeros = torch.zeros
    torch.zeros = lambda *a, pin_memory=False, **k: zeros(*a, **k)
    dist.is_initialized = lambda: True
    dist.get_world_size = lambda group=None: 8
    dist.get_rank = lambda group=None: 0
    dist.broadcast = dist.reduce = dist.new_group = lambda *a, **k: None
    os.environ["LOCAL_WORLD_SIZE"] = "8"
    try:
        import psutil  # noqa: F401
    except ImportError:
        d = tempfile.mkdtemp()
        Path(d, "psutil.py").write_text(
            "from collections import namedtuple\n"
            "_vm = namedtuple('vm', 'total available used free percent cached buffers shared')\n"
            "def virtual_memory():\n    return _vm(2**40, 2**39, 2**39, 2**39, 50.0, 0, 0, 0)\n"
        )
        sys.path.insert(0, d)


def run(torch: Any, iterations: int) -> dict[str, float]:
    """One process's measurement (module doc): seconds per call and the reference op."""
    import patrickstar.core.hook as hook
    import patrickstar.core.memtracer.memtracer as mt
    import patrickstar.utils.memory_monitor as mm
    from patrickstar.core import ChunkType, PatrickStarClient, PSPreProcessCtx
    from patrickstar.core.const import ChunkState, TensorState, TrainingStage

    mm.get_sys_memory_used = mt.get_sys_memory_used = lambda device: 0
    per_layer = 6 * (H * H + H) + 4 * H
    chunk = -(-LAYERS * per_layer // (FP16_CHUNKS - 1))
    config = {"mem_tracer": {"use_async_mem_monitor": False},
              "opts": {"with_mem_saving_comm": True, "with_mem_cache": True,
                       "with_async_move": False}}  # fmt: skip
    client = PatrickStarClient(rank=0, default_chunk_size=chunk, config=config)
    client.device = client.chunk_list.device = torch.device("cpu")

    def block() -> list[Any]:
        lin, ln = torch.nn.Linear, torch.nn.LayerNorm
        return [lin(H, H), lin(H, H), lin(H, H), lin(H, H), ln(H), lin(H, H), lin(H, H), ln(H)]

    with PSPreProcessCtx(client=client, dtype=torch.float, release_after_init=False):
        mods = [m for _ in range(LAYERS) for m in block()]
    fp16 = sum(1 for _ in client.chunk_ids_generator(ChunkType.PARAM_FP16))
    for kind in (ChunkType.MOMENTUM, ChunkType.VARIANCE):
        for _ in range(fp16):
            client.append_chunk(torch.float, kind)
    client.optimizer = types.SimpleNamespace(check_overflow=lambda p: None)
    client.mem_tracer._param_fp16_chunk_size = 0
    client.mem_tracer._default_chunk_size = chunk
    tensors = sum(len(list(m.parameters(recurse=False))) for m in mods)

    def iteration(warmup: bool) -> tuple[float, float]:
        client.set_warmup(warmup)
        client.set_training_phase(TrainingStage.FWD)
        client.mem_tracer.reset_memory_stats()
        client.mem_tracer.metronome.reset()
        for p in client.chunk_based_param_fp16:
            p.ps_attr.fwd_used_cnt = 0
        client.reset_visited_chunk()
        for m in mods:
            hook.pre_sub_module_forward_function(m, client, "m")
            hook.post_sub_module_forward_function(m, client, "m")
        for cid, c in client.chunk_list.generate_chunk():  # engine._set_state_after_forward
            if c.get_state() in (ChunkState.HOLD, ChunkState.HOLD_AFTER_FWD):
                c.set_unused()
                client.set_all_tensors_state_in_chunk(cid, TensorState.HOLD)
        client.reset_visited_chunk()
        client.set_training_phase(TrainingStage.BWD)
        for p in client.chunk_based_param_fp16:
            p.ps_attr.bwd_used_cnt = 0
        pre = post = 0.0
        for m in reversed(mods):
            a = time.perf_counter()
            hook.pre_sub_module_backward_function(m, client, "m")
            b = time.perf_counter()
            hook.post_sub_module_backward_function(m, client, "m")
            pre, post = pre + b - a, post + time.perf_counter() - b
        return pre / tensors, post / tensors

    iteration(True)
    x, one = torch.zeros(chunk, dtype=torch.half), torch.ones(1)
    g = torch.zeros(H * H, dtype=torch.half).view(H, H)

    def unit() -> float:
        with torch.no_grad():
            return per_call_s(lambda: 2 * one, 20000)

    before = unit()
    times = [iteration(False) for _ in range(iterations)]
    out = {
        "pre_s": min(t[0] for t in times),
        "post_s": min(t[1] for t in times),
        "views_s": per_call_s(lambda: x.narrow(0, 128, H * H).view(H, H), 20000),
        "zeros_like_s": per_call_s(lambda: torch.zeros_like(g), 20000),
        "copy_s": per_call_s(lambda: g.copy_(g), 20000),
        "empty_s": per_call_s(lambda: torch.tensor([], dtype=torch.half), 20000),
        "memory_allocated_s": per_call_s(memory_allocated_1x, 2000),
    }
    out["unit_s"] = (before + unit()) / 2
    out["chunks"] = len(client.chunk_list.id_to_chunk_map)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patrickstar", required=True, help="folder holding PatrickStar's package")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if args.child:
        import torch

        stub(torch)
        sys.path.insert(0, args.patrickstar)
        print(yaml.safe_dump(run(torch, args.iterations)))
        return
    import subprocess

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from backends.torch.profile.layers import cpu_model_name

    runs = []
    for _ in range(args.runs):  # one process each: the stubs patch torch
        cmd = [sys.executable, __file__, "--child", "--patrickstar", args.patrickstar,
               "--iterations", str(args.iterations)]  # fmt: skip
        text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = yaml.safe_load(text[text.index("chunks:") :])
        u = r["unit_s"]
        runs.append({
            "reference_op_us": round(u * 1e6, 2),
            "pre_hook_python_ops_per_tensor": round((r["pre_s"] - r["views_s"] - r["zeros_like_s"]) / u, 2),
            "post_hook_python_ops_per_tensor": round((r["post_s"] - r["copy_s"] - r["empty_s"]) / u, 2),
            "memory_allocated_ops": round(r["memory_allocated_s"] / u, 2),
            "chunks": r["chunks"],
        })  # fmt: skip
    keys = ("pre_hook_python_ops_per_tensor", "post_hook_python_ops_per_tensor",
            "memory_allocated_ops")  # fmt: skip
    out = {
        "what": "PatrickStar@4ef26cc backward module hooks' Python on this host, in no-grad "
        "op units (measurements/host/patrickstar_hooks.py module doc)",
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python measurements/host/patrickstar_hooks.py --patrickstar DIR",
        "notes": "one process per run; per run the fastest of its iterations (hooks) or of 5 "
        "loops (ops); the 2 cores were shared with other jobs: times vary, their ratio "
        "to the reference op less so",
        "median": {k: statistics.median(r[k] for r in runs) for k in keys},
        "runs": runs,
    }
    path = Path(__file__).resolve().parent / "patrickstar_hooks.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False))
    print(path.read_text())


if __name__ == "__main__":
    main()
