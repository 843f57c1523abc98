"""pipesim's memory model against Galvatron's measured memory profiles (Llama-2-7B, bf16).

Measured: ``measurements/galvatron/memory_profiling_bf16_llama2-7b_all.json`` (PKU-DAIR/
Hetu-Galvatron @cea12ff), MiB per rank of 8 GPUs, global batch 8, per ``pp_tp_dp`` strategy:
``_ms`` = ``memory_allocated`` after the backward of iteration 4 (model states), ``_act`` =
allocated after the forward minus before it (the stash of every micro-batch), ``_act_peak`` =
max allocated during the iteration minus allocated after the backward (Galvatron
``core/profiler/runtime_profiler.py``). Galvatron profiles with ``profile_dp_type zero3`` (model
states sharded over the data-parallel group), flash attention and sequence parallelism flags
(``gpt_hf/scripts/profile_memory.sh``); ``_c`` entries checkpoint every layer.

Sequence length: the keys say ``seq2048`` but the checkpointed entry stores exactly 32.0 MiB per
layer and sample, which is the layer input ``2*s*b*h`` bytes (memory.md §2, full recompute) only
for ``s = 4096`` (Llama-2's context); the ``seqlen2048`` file's entry is compared at ``s = 2048``.

Predicted with pipesim's formulas, nothing fitted to these files:

* model states: :func:`sim.memory.states.stage_state_bytes_per_param` (16 bytes/param for bf16
  Adam) x the rank's parameters / dp (ZeRO-3); Llama-2-7B layer ``4h^2 + 3hf + 2h``,
  embedding and untied output layer ``V*h`` each;
* activations: :func:`sim.trace.analytic_layers.block_act_bytes` (Korthikanti et al.,
  ``34sbh + 5as^2b``) minus :func:`~sim.trace.analytic_layers.attn_core_act_bytes` (flash attention,
  :mod:`sim.memory.attention`); embedding ``8sb + sbh`` (generator); output layer: the logits in
  the training dtype ``d*s*b*V`` plus the final norm's input and output ``4sbh``; a non-last
  stage also keeps its output per micro-batch (:func:`sim.memory.reserve.output_cache_bytes`);
* activation peak: ``_act_peak`` subtracts the allocation after the backward, which holds every
  gradient, while a peak early in the backward precedes most of them (``zero_grad`` sets them to
  None, torch's default since 2.0; ``train_dist.py`` profiles "After Backward" before the
  optimizer step). So the prediction is ``live - gradients not yet allocated``, the largest over
  the rank's backwards (:func:`peak_candidates`), with the terms of
  :mod:`sim.memory.transients`: at the loss backward the whole stash, the head's gathered bf16
  weights (ZeRO-3) and the fp32 logits gradient ``4*s*b*V``; at a layer's backward the stash
  left, the layer's gathered weights and unsharded gradient (FSDP), the MLP's activation
  gradients ``(2f + h)*s*b*2`` and, with checkpointing, the recomputed layer's full stash.

Micro-batches: a rank runs one micro-batch of its ``8 / dp`` samples (assumed: the launcher in
``core/profiler/model_profiler.py`` passes no ``chunks``; unverified, but the last stages'
measured peaks grow by one ``4sV`` logits gradient per sample, as one micro-batch gives).

Modelled: tensor-parallel size 1 (``1_1_8``, ``1_1_8_c``, ``2_1_4``, ``4_1_2``) at s = 4096, and
the ``act`` rows of the ``seqlen2048`` file. Not modelled: tensor and vocabulary parallelism
(``tp > 1``, ``vtp``): pipesim has no tensor parallelism; the ``seqlen2048`` file's ``ms`` and
``act_peak`` (:data:`SEQ2048_WHY`, measured gaps -23 % and -48 %).

Run alone: ``python benchmarks/accuracy/accuracy_memory.py`` prints one row per compared number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sim.memory.states import stage_state_bytes_per_param, state_bytes
from sim.memory.transients import (
    grads_not_allocated_bytes,
    logits_grad_bytes,
    mlp_backward_working_bytes,
    zero3_backward_bytes,
    zero3_gathered_bytes,
)
from sim.trace.generator import attn_core_act_bytes, block_act_bytes

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    4096: ROOT / "measurements/galvatron/memory_profiling_bf16_llama2-7b_all.json",
    2048: ROOT / "measurements/galvatron/memory_profiling_bf16_llama2-7b_seqlen2048_all.json",
}
MIB = 2.0**20
H, A, F, V, D = 4096, 32, 11008, 32000, 2  # Llama-2-7B; bf16
WORLD, GLOBAL_BATCH = 8, 8
SEQ2048_WHY = (
    "this file's run differs from the s=4096 file's in settings it does not record: its model "
    "states hold 250 MiB (one V*h bf16 copy) more than ZeRO-3 accounting gives (1154 vs 904 "
    "MiB), and its peak lies 1460 MiB above the stash against 528 MiB at s=4096 although every "
    "sequence-proportional term halves; no sourced mechanism explains it"
)
BOUND = 0.10
"""Relative error the benchmark and tests hold where the model applies."""

LAYER_PARAMS = 4 * H * H + 3 * H * F + 2 * H
EMBED_PARAMS = V * H
HEAD_PARAMS = V * H + H  # untied output layer + final RMSNorm


def layer_act_bytes(s: int, b: int = 1) -> float:
    """One Llama-2-7B layer's stash with flash attention (pipesim's block formula)."""
    return block_act_bytes(b, s, H, A) - attn_core_act_bytes(b, s, A)


def head_act_bytes(s: int, b: int = 1) -> float:
    """Output layer stash: logits in the training dtype and the final norm's input/output."""
    return D * s * b * V + 4 * s * b * H


def predict(pp: int, rank_last: bool, layers: int, s: int, checkpoint: bool) -> dict[str, float]:
    """Predicted ``ms``, ``act``, ``act_peak`` (bytes) of a rank (first or last stage).

    The rank runs one micro-batch of all its ``8 / dp`` samples (module doc). ``act_peak`` is
    the largest of the candidate peaks (:func:`peak_candidates`)."""
    dp = WORLD // pp
    per_param = stage_state_bytes_per_param(state_bytes("bf16", "adam"), 1)
    per_stage = layers // pp
    first, last = (not rank_last) or pp == 1, rank_last or pp == 1
    params = per_stage * LAYER_PARAMS + EMBED_PARAMS * first + HEAD_PARAMS * last
    b = GLOBAL_BATCH // dp
    layer = 2 * s * H if checkpoint else layer_act_bytes(s)
    act_one = per_stage * layer + (8 * s + s * H) * first + head_act_bytes(s) * last
    if not last:
        act_one += D * s * H  # the stage output kept until its backward
    act = b * act_one
    peak = max(peak_candidates(act, b, s, per_stage, first, last, checkpoint, dp).values())
    return {"ms": params * per_param / dp, "act": act, "act_peak": peak}


def peak_candidates(
    act: float, b: int, s: int, per_stage: int, first: bool, last: bool, ckpt: bool, dp: int
) -> dict[str, float]:
    """Galvatron's ``_act_peak`` (bytes) if the iteration peaked at each backward of the rank:
    ``live - grads not yet allocated``, since ``_act_peak`` subtracts the allocation after the
    backward, which holds every gradient (:mod:`sim.memory.transients`).

    * ``head``: the loss backward; the stash is whole, the head's gathered 16-bit weights and
      the fp32 logits gradient are live, no gradient is allocated yet;
    * ``layer k``: layer ``k``'s backward; the head's stash and those of the layers after ``k``
      are freed and their gradients allocated; FSDP holds the layer's gathered weights and
      unsharded gradient; the MLP's activation gradients are live; with checkpointing the
      layer's full stash has been recomputed (its input was already kept).
    """
    grads = [EMBED_PARAMS * first] + [LAYER_PARAMS] * per_stage + [HEAD_PARAMS * last]
    grads = [4.0 * n / dp for n in grads]  # fp32 gradient shards (ZeRO-3)
    out = {}
    if last:
        out["head"] = (
            act
            + zero3_gathered_bytes(HEAD_PARAMS)
            + logits_grad_bytes(s, b, V)
            - grads_not_allocated_bytes(grads, 0)
        )
    layer_full = layer_act_bytes(s) * b
    kept = (2 * s * H if ckpt else layer_act_bytes(s)) * b
    live = act - head_act_bytes(s) * b * last
    for k in range(per_stage, 0, -1):
        done = last + (per_stage - k)
        transient = (
            zero3_backward_bytes(LAYER_PARAMS)
            + mlp_backward_working_bytes(s, b, H, 2 * F)
            + (layer_full - kept)
        )
        out[f"layer {k}"] = live + transient - grads_not_allocated_bytes(grads, done)
        live -= kept
    return out


KEY = re.compile(r"layernum\[(\d+)\]_bsz8_seq\d+_rank(\d+)_(ms|act_peak|act)$")
STRATEGY = re.compile(r"^(\d+)_(\d+)_(\d+)(_c)?_sp$")


def rows() -> list[dict]:
    """One row per measured number: strategy, rank, layers, category, measured and predicted
    MiB, relative error, whether pipesim models it (``modelled``) and why not."""
    out = []
    for s, path in FILES.items():
        data = json.loads(path.read_text())
        for strategy, entries in data.items():
            m = STRATEGY.match(strategy)
            if not m:
                continue
            pp, tp, _dp, ckpt = int(m[1]), int(m[2]), int(m[3]), bool(m[4])
            for key, mib in entries.items():
                k = KEY.match(key)
                if not k:
                    continue
                layers, rank, cat = int(k[1]), int(k[2]), k[3]
                row = {
                    "file": path.name,
                    "seq": s,
                    "strategy": strategy,
                    "rank": rank,
                    "layers": layers,
                    "category": cat,
                    "measured_mib": mib,
                }
                if tp > 1:
                    out.append(
                        {
                            **row,
                            "modelled": False,
                            "predicted_mib": None,
                            "rel_error": None,
                            "why": "tensor parallelism is not modelled",
                        }
                    )
                    continue
                pred = predict(pp, rank == WORLD - 1, layers, s, ckpt)[cat] / MIB
                why = ""
                if s == 2048 and cat != "act":
                    why = SEQ2048_WHY
                out.append(
                    {
                        **row,
                        "modelled": not why,
                        "predicted_mib": round(pred, 2),
                        "rel_error": round(pred / mib - 1, 4),
                        "why": why,
                    }
                )
        out.extend(_per_layer_rows(data, s, path.name))
    return out


def _per_layer_rows(data: dict, s: int, name: str) -> list[dict]:
    """Per-layer differences (layernum[2] - layernum[1]) of the 1_1_8 entries: one layer's
    model states, stash and checkpointed stash per sample."""
    out = []
    for strategy, cat, pred in (
        ("1_1_8_sp", "ms", LAYER_PARAMS * 16 / WORLD),
        ("1_1_8_sp", "act", layer_act_bytes(s)),
        ("1_1_8_c_sp", "act", 2 * s * H),
    ):
        e = data.get(strategy, {})
        k1, k2 = (f"layernum[{n}]_bsz8_seq2048_rank0_{cat}" for n in (1, 2))
        if k1 in e and k2 in e:
            mib = e[k2] - e[k1]
            out.append(
                {
                    "file": name,
                    "seq": s,
                    "strategy": strategy,
                    "rank": 0,
                    "layers": "2-1",
                    "category": f"{cat}_per_layer",
                    "measured_mib": round(mib, 3),
                    "modelled": True,
                    "predicted_mib": round(pred / MIB, 3),
                    "rel_error": round(pred / MIB / mib - 1, 4),
                    "why": "",
                }
            )
    return out


if __name__ == "__main__":
    import pandas as pd

    df = pd.DataFrame(rows())
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(df.drop(columns=["file"]).to_string(index=False))
    mod = df[df.modelled]
    print(
        f"\nmodelled {len(mod)} of {len(df)}; max |error| {mod.rel_error.abs().max():.1%}; "
        f"within {BOUND:.0%}: {(mod.rel_error.abs() <= BOUND).sum()} of {len(mod)}"
    )
