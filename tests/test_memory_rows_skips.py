"""Which functional tests ``bench_memory.py`` leaves out (``memory_rows._skip``)."""

from types import SimpleNamespace

from benchmarks.accuracy.memory_rows import COPIED_GOLDEN, GRAPHED_PP, UNMODELLED, _skip

ROW = SimpleNamespace(num_gpus=8.0)
GPT = {"--num-layers": 12, "--hidden-size": 512, "--pipeline-model-parallel-size": 2}


def test_memory_rows_predict_t5_hybrid_mtp_fp8_and_uneven_pipelines():
    """Kinds ``sim import`` expresses are no longer left out by name or argument."""
    t5 = {"--encoder-num-layers": 12, "--decoder-num-layers": 12, "--hidden-size": 512}
    hybrid = {"--hybrid-layer-pattern": "M-M*-", "--hidden-size": 1024}
    assert _skip("t5_mcore_tp1_pp1_vp1 [dev_dgx_a100]", "t5", t5, ROW) == ""
    assert _skip("hybrid_mr_x [dev_dgx_a100]", "hybrid", hybrid, ROW) == ""
    for flag in ("--mtp-num-layers", "--fp8-format", "--decoder-first-pipeline-num-layers",
                 "--pipeline-model-parallel-layout"):  # fmt: skip
        assert _skip("gpt3_x [dev_dgx_a100]", "gpt3", {**GPT, flag: 1}, ROW) == ""


def test_memory_rows_skip_graphs_only_under_pipeline_parallelism():
    """TE CUDA graphs capture every microbatch only when PP > 1 (cuda_graphs.py 2596-2603)."""
    graphed = {**GPT, "--cuda-graph-impl": "transformer_engine"}
    assert _skip("gpt3_moe_x [dev_dgx_gb200]", "gpt3", graphed, ROW) == GRAPHED_PP
    pp1 = {**graphed, "--pipeline-model-parallel-size": 1}
    assert _skip("gpt3_moe_x [dev_dgx_gb200]", "gpt3", pp1, ROW) == ""
    none = {**GPT, "--cuda-graph-impl": "none"}
    assert _skip("gpt3_moe_x [dev_dgx_gb200]", "gpt3", none, ROW) == ""


def test_memory_rows_keep_unmodelled_and_unrecorded_skips():
    """Activation offloading, multimodal and unrecorded world sizes stay out; Megatron-FSDP,
    which the time benchmark predicted while this one still called it unmodelled, is in
    (sim.memory.fsdp, sim.memory.fsdp_step)."""
    fsdp = {**GPT, "--use-megatron-fsdp": True}
    offload = {**GPT, "--fine-grained-activation-offloading": True}
    assert _skip("gpt3_x [dev]", "gpt3", fsdp, ROW) == ""
    assert "--use-megatron-fsdp" not in UNMODELLED
    assert "offloading" in _skip("gpt3_x [dev]", "gpt3", offload, ROW)
    assert _skip("multimodal_llava_x [dev]", "multimodal", GPT, ROW) != ""
    assert _skip("gpt3_x [dev]", "gpt3", GPT, SimpleNamespace(num_gpus=float("nan"))) != ""
    copied = next(iter(COPIED_GOLDEN))
    assert "copied" in _skip(copied, "hybrid", {"--hybrid-layer-pattern": "M-"}, ROW)
