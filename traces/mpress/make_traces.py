"""Write the analytic traces of ``experiments/mpress-dgx1.yaml`` into ``traces/mpress/``.

Run from anywhere: ``python traces/mpress/make_traces.py``. GPT and BERT stacks
(:func:`sim.trace.generator.transformer_trace`, the same kernel model as the shipped traces:
the ``dgx1-v100-16gb`` preset's V100-SXM2; ``sim run`` rescales to the 32 GB V100 of the
experiment) at model sizes spanning MPress's DGX-1 range (Zhou et al. HPCA'23 §VI, billion-scale
BERT and GPT; the paper's exact shapes were not available here, see mpress-dgx1.md). Shapes:
GPT h = 4096, 32 heads, sequence 1024, GPT-2 vocabulary, 16 to 80 layers (3.6B to 16.5B);
BERT h = 2560, 40 heads, sequence 512, BERT vocabulary, 32 to 128 layers (2.7B to 10.2B).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from sim.trace.generator import preset_gpu, transformer_trace  # noqa: E402
from sim.trace.native import write_trace  # noqa: E402

GPT_LAYERS = (16, 32, 40, 48, 56, 64, 72, 80)
BERT_LAYERS = (32, 64, 80, 96, 112, 128)


def shapes() -> list[dict]:
    """Keyword arguments of :func:`transformer_trace` per model, named by size."""
    gpt = dict(kind="gpt", hidden=4096, heads=32, seq_len=1024, vocab=50257)
    bert = dict(kind="bert", hidden=2560, heads=40, seq_len=512, vocab=30522)
    out = [dict(gpt, layers=n, name=f"mpress-gpt-L{n}") for n in GPT_LAYERS]
    return out + [dict(bert, layers=n, name=f"mpress-bert-L{n}") for n in BERT_LAYERS]


def main() -> None:
    for shape in shapes():
        kind = shape.pop("kind")
        trace = transformer_trace(
            kind, microbatch_size=1, dtype="fp16", gpu=preset_gpu("dgx1-v100-16gb"), **shape
        )
        prov = dict(trace.provenance, command="python traces/mpress/make_traces.py")
        csv_path, _ = write_trace(replace(trace, provenance=prov), HERE / trace.name)
        print(csv_path.relative_to(HERE.parents[1]), f"{trace.parameters / 1e9:.2f}B")


if __name__ == "__main__":
    main()
