"""Measured-CSV-style rows of Megatron-Bridge presets shared by several tests (shape columns only;
no measured time: these rows are what the tests express and predict)."""

SUPER_H100_26_08 = {
    "table": "26.08 / Pre-Training Performance / Model: Nemotron_3_Super",
    "task": "pretrain", "model": "Nemotron_3_Super", "family": "hybrid-moe",
    "seq_len": 4096, "gpu": "H100", "num_gpus": 64, "tp": 1, "pp": 2, "vp": 1, "cp": 1,
    "ep": 32, "gbs": 1280, "mbs": 1, "precision": "BF16",
    "framework": "Megatron-Bridge/Megatron-Core", "config_consistent": "True",
}  # fmt: skip
"""Nemotron 3 Super's 26.08 H100 BF16 preset as a 64-GPU row (Megatron-Bridge v0.6.0
``perf_recipes/nemotronh/h100/nemotronh.py``; seq 4096 is its library recipe's)."""
