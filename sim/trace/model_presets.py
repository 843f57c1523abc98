"""Published model shapes the analytic generator builds by name
(:func:`sim.trace.generator.preset_trace`): GPT-2 1.5B, BERT-Large, a 5B GPT, PatrickStar's
GPT configs and the same configs as its BERT benchmark builds them, and the ZeRO-Offload
tutorial's 10B GPT-2 (sources beside each entry)."""

from __future__ import annotations

#: Published model shapes. ``gpt-5b`` is the 44-layer, h=3072 GPT of ~5B parameters.
MODEL_PRESETS: dict[str, dict[str, int | str]] = {
    "gpt2-1.5b": {
        "kind": "gpt",
        "layers": 48,
        "hidden": 1600,
        "heads": 25,
        "seq_len": 1024,
        "vocab": 50257,
    },
    "bert-large": {
        "kind": "bert",
        "layers": 24,
        "hidden": 1024,
        "heads": 16,
        "seq_len": 512,
        "vocab": 30522,
    },
    "gpt-5b": {
        "kind": "gpt",
        "layers": 44,
        "hidden": 3072,
        "heads": 24,
        "seq_len": 1024,
        "vocab": 50257,
    },
    **{
        name: {"kind": "gpt", "hidden": h, "seq_len": s, "layers": L, "heads": a, "vocab": 50257}
        for name, (h, s, L, a) in {
            # PatrickStar's GPT configs (Tencent/PatrickStar@2384535 examples/model_builder.py,
            # hidden/seq/layers/heads; memory.md §5.4), GPT-2 vocabulary.
            "gpt2-1b": (2048, 1024, 20, 16),
            "gpt2-4b": (2304, 1024, 64, 16),
            "gpt3-8b": (3072, 1024, 72, 16),
            "gpt3-10b": (4096, 1024, 50, 16),
            "gpt3-13b": (4096, 1024, 65, 16),
            "gpt3-15b": (4096, 1024, 78, 16),
            "gpt3-18b": (4096, 1024, 90, 16),
            "gpt-ds-20b": (8192, 1024, 25, 16),
            "gpt-ds-40b": (8192, 1024, 50, 16),
            "gpt-ds-50b": (8192, 1024, 62, 16),
            "gpt-ds-60b": (8192, 1024, 75, 16),
            "gpt-ds-68b": (9216, 1024, 66, 16),
            # later additions to the same file (Tencent/PatrickStar@04af7c9):
            # GPT_DS_70B and GPT_NV_76B (Narayanan et al.'s 76B shape)
            "gpt-ds-70b": (9216, 1024, 69, 16),
            "gpt-nv-76b": (10240, 1024, 60, 16),
            # The ZeRO-Offload tutorial's 10B GPT-2 (deepspeedai/DeepSpeed@2dea61f28
            # docs/_tutorials/zero-offload.md: --num-layers 50 --hidden-size 4096
            # --num-attention-heads 32), the model of the paper's "40 TFlops ... for 10B".
            "zo-gpt2-10b": (4096, 1024, 50, 32),
        }.items()
    },
    **{
        f"ps-{name}": {
            "kind": "bert",
            "hidden": h,
            "seq_len": s,
            "layers": L,
            "heads": a,
            "vocab": 30522,
            "modeling": "hf",
        }
        for name, (h, s, L, a) in {
            # The same configs as PatrickStar's benchmark builds them: BERT
            # (transformers.BertForSequenceClassification over BertConfig(hidden_size,
            # num_hidden_layers, num_attention_heads, max_position_embeddings=seq), BERT's
            # vocabulary of 30522; Tencent/PatrickStar@04af7c9 examples/model_builder.py
            # build_transformer_model), with Hugging Face's kernels and classification head
            # (modeling "hf": sim.compute.hf_bert).
            "gpt2-1b": (2048, 1024, 20, 16),
            "gpt2-2b": (2048, 1024, 40, 16),
            "gpt2-4b": (2304, 1024, 64, 16),
            "gpt3-6b": (3072, 1024, 53, 16),
            "gpt3-8b": (3072, 1024, 72, 16),
            "gpt3-10b": (4096, 1024, 50, 16),
            "gpt3-12b": (4096, 1024, 60, 16),
            "gpt3-15b": (4096, 1024, 78, 16),
            "gpt3-18b": (4096, 1024, 90, 16),
            "gpt-ds-20b": (8192, 1024, 25, 16),
            "gpt-ds-40b": (8192, 1024, 50, 16),
            "gpt-ds-50b": (8192, 1024, 62, 16),
            "gpt-ds-60b": (8192, 1024, 75, 16),
            "gpt-ds-68b": (9216, 1024, 66, 16),
            "gpt-ds-70b": (9216, 1024, 69, 16),
            "gpt-nv-76b": (10240, 1024, 60, 16),
        }.items()
    },
}
