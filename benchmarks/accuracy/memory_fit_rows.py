"""Measured configurations that ran (so each must fit), as pipesim configurations (for
``bench_memory.py``): vTrain's 1,440 single-node iterations and Megatron-LM's SC'21 Table 1.
No peak was measured for them; the check is the fit verdict (a false no-fit is one pipesim says
does not fit).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from benchmarks.accuracy.memory_rows import MEASURED, MemoryCase

VTRAIN = MEASURED.parent / "vtrain"
VTRAIN_VOCAB = 50257
"""vTrain's configs do not state a vocabulary: Megatron's GPT-2 BPE (assumption, as
``bench_measured.py``)."""


def vtrain_cases(folder: Path = VTRAIN, preset: str = "dgx-a100-40gb") -> list[MemoryCase]:
    """vTrain's measured configurations (``ground_truth_single_h*.csv``): each ran, so each
    must fit. Megatron-DeepSpeed (``framework: megatron-deepspeed``), fp16, every layer
    checkpointed (``recompute:full``), 1F1B (vTrain's configs; ``shared/data/README.md``), on
    the smaller DGX A100 (40 GB: the GPU's memory is not stated)."""
    out = []
    for path in sorted(folder.glob("ground_truth_single_h*.csv")):
        df = pd.read_csv(path).drop_duplicates(
            ["global_batch", "microbatch_size", "hidden", "heads", "layers", "seq_len",
             "tensor_parallel", "data_parallel", "pipeline_parallel"]
        )  # fmt: skip
        for r in df.itertuples(index=False):
            dp, mbs = int(r.data_parallel), int(r.microbatch_size)
            out.append(
                MemoryCase(
                    case=f"vtrain h{r.hidden} L{r.layers} t{r.tensor_parallel} "
                    f"p{r.pipeline_parallel} w{dp} b{mbs} B{r.global_batch}",
                    source="vtrain",
                    version="Megatron-DeepSpeed",
                    gpu="A100",
                    preset=preset,
                    model={
                        "gpt": {
                            "kind": "gpt",
                            "layers": int(r.layers),
                            "hidden": int(r.hidden),
                            "heads": int(r.heads),
                            "seq_len": int(r.seq_len),
                            "vocab": VTRAIN_VOCAB,
                        }
                    },  # fmt: skip
                    layout={
                        "tp": int(r.tensor_parallel),
                        "pp": int(r.pipeline_parallel),
                        "vp": 1,
                        "cp": 1,
                        "ep": 1,
                        "dp": dp,
                        "sp": False,
                    },  # fmt: skip
                    gbs=int(r.global_batch),
                    mbs=mbs,
                    m=int(r.global_batch) // (mbs * dp),
                    policy="recompute:full",
                    memory={"dtype": "fp16"},
                    framework="megatron-deepspeed",
                )
            )
    return out


SC21 = Path(__file__).resolve().parents[2] / "measurements" / "megatron-sc21" / "table1.csv"


def sc21_cases(path: Path = SC21) -> list[MemoryCase]:
    """Megatron-LM's SC'21 Table 1 runs (``measurements/megatron-sc21``, as
    ``measured_sc21.py`` runs them: GPT, sequence 2048, vocabulary 51,200, fp16,
    ``recompute:full``, interleaved 1F1B where the script sets it, ``--DDP-impl``'s
    framework): each ran on DGX A100 80 GB, so each must fit."""
    df = pd.read_csv(path)
    frameworks = {"torch": "megatron-lm-torch-ddp", "local": "megatron-lm"}
    out = []
    for r in df.itertuples(index=False):
        t, p, v = int(r.tensor_parallel), int(r.pipeline_parallel), int(r.virtual_stages)
        dp = int(r.gpus) // (t * p)
        mbs = int(r.microbatch_size)
        out.append(
            MemoryCase(
                case=f"sc21 {r.params_b}B t{t} p{p} w{dp} v{v}",
                source="sc21",
                version="Megatron-LM (2021)",
                gpu="A100-SXM-80GB",
                preset="dgx-a100-80gb",
                model={"gpt": {"kind": "gpt", "layers": int(r.layers), "hidden": int(r.hidden),
                               "heads": int(r.heads), "seq_len": 2048, "vocab": 51200}},
                layout={"tp": t, "pp": p, "vp": v, "cp": 1, "ep": 1, "dp": dp, "sp": False},
                gbs=int(r.global_batch),
                mbs=mbs,
                m=int(r.global_batch) // (mbs * dp),
                policy="recompute:full",
                memory={"dtype": "fp16"},
                framework=frameworks[str(r.ddp)],
            )
        )  # fmt: skip
    return out
