"""The T5 generator (sim.compute.t5, sim.trace.t5, sim.parallel.t5_shard) and the T5 branch of
the readers: hand-computed small cases and a functional test's configuration end to end."""

from __future__ import annotations

import pytest

from sim.compute.t5 import T5Shape, layer_act_bytes, layer_params, unique_params
from sim.events import EventKind
from sim.parallel.t5_shard import shard_t5
from sim.runs.express import Expressed, NotExpressed, express
from sim.runs.megatron_args import read_megatron
from sim.runs.predict import Predictor
from sim.runs.t5_express import t5_shape
from sim.trace.adapt import adapt_trace
from sim.trace.generator import preset_gpu
from sim.trace.t5 import is_t5, t5_trace

AR = EventKind.ALLREDUCE.value
TINY = T5Shape(
    encoder_layers=1, decoder_layers=1, hidden=4, heads=2, ffn_hidden=8, encoder_seq=4,
    decoder_seq=2, vocab=10, max_positions=4,
)  # fmt: skip
"""h 4, a 2 (q = 4), F 8, s_e 4, s_d 2, V 10, P 4."""


@pytest.fixture(scope="module")
def a100():
    return preset_gpu("dgx-a100-80gb")


def test_parameters_hand_computed():
    # embedding V h + P h; encoder layer: qkv 4*12+12, proj 4*4+4, fc1 4*8+8, fc2 8*4+4,
    # two norms 16 = 172 (+ the encoder's final norm 8); decoder layer 172 + norm 8 + q 16+4
    # + kv 32+8 + proj 16+4 = 260; head: the word table's copy 40, bias 10, final norm 8
    assert [layer_params(k, TINY) for k in ("embedding", "enc_block", "enc_last")] == [56, 172, 180]
    assert layer_params("dec_block", TINY) == 260
    assert layer_params("head", TINY) == 58
    assert unique_params(TINY) == 56 + 180 + 260 + 58 - 40
    # on one of 2 tensor ranks: the split part (3hq + 3q + qh + hF + F + Fh = 148) halves,
    # the row-parallel biases (8) and the norms (16) stay whole
    assert layer_params("enc_block", TINY, t=2) == 148 // 2 + 8 + 16


def test_forward_flops_hand_computed(a100):
    trace = t5_trace(TINY, name="tiny", microbatch_size=1, gpu=a100, dtype="bf16")
    flops = {x.name: x.flops for x in trace.layers}
    # encoder: 2 s_e (3hq + qh + 2hF) = 8*128 = 1024, core 4 s_e^2 q = 256
    assert flops["enc_block.0"] == 1024 + 256
    # decoder: self 2 s_d (4hq + 2hF) = 512 + core 4 s_d^2 q = 64; cross: q 2 s_d h q = 64,
    # kv 2 s_e h 2q = 256, core 4 s_d s_e q = 128, proj 64
    assert flops["dec_block.0"] == 512 + 64 + 64 + 256 + 128 + 64
    assert flops["head"] == 2 * 2 * 4 * 10  # 2 s_d h V
    assert flops["embedding"] == 0
    assert is_t5(trace) and trace.provenance["unique_parameters"] == 514


def test_activations_hand_computed():
    d = 2  # encoder: d(8 sbh + 2 sbF) + 2 sbh + (2d + 1) a s^2 b, sbh 16, sbF 32
    assert layer_act_bytes("enc_block", TINY, 1, d) == 2 * (128 + 64) + 32 + 5 * 2 * 16
    assert layer_act_bytes("enc_last", TINY, 1, d) == 576 + 2 * d * 16  # final norm in, out
    # decoder: self at s_d (sbh 8, sbF 16) 248; cross: (2d + 1) s_d b h = 40 whole,
    # 2d s_d b h + 2d s_e b h + (2d + 1) a s_d s_e b = 32 + 64 + 80 split
    assert layer_act_bytes("dec_block", TINY, 1, d) == 248 + 40 + 176
    # two tensor ranks, no sequence parallelism: (4d + 2) sbh = 160 + 40 whole
    assert layer_act_bytes("dec_block", TINY, 1, d, t=2) == (10 * 8 + 40) + (168 + 176) / 2


def test_decoder_collectives(a100):
    trace = t5_trace(TINY, name="tiny", microbatch_size=1, gpu=a100, dtype="bf16")
    sharded = shard_t5(trace, 2, False, a100)
    dec = sharded.comm[2]  # embedding, enc_block.0, dec_block.0, head
    xd, xe = 1 * 2 * 4 * 2, 1 * 4 * 4 * 2
    assert [(c.kind, c.nbytes) for c in dec.fwd] == [(AR, xd)] * 3
    assert sorted(c.nbytes for c in dec.bwd) == [xd, xd, xd, xe]  # linear_kv: encoder output
    assert len(sharded.comm[0].fwd) == 2  # the embedding called on both inputs
    sp = shard_t5(trace, 2, True, a100, regather=True).comm[2]
    assert len(sp.fwd) == 7 and len(sp.bwd) == 11
    assert sharded.trace.layers[2].param_bytes == layer_params("dec_block", TINY, 2) * 2
    with pytest.raises(ValueError, match="does not divide"):
        shard_t5(trace, 4, False, a100)


def test_regenerated_at_microbatch(a100):
    trace = t5_trace(TINY, name="tiny", microbatch_size=1, gpu=a100, dtype="bf16")
    again, notes = adapt_trace(trace, 3, a100)
    direct = t5_trace(TINY, name="tiny", microbatch_size=3, gpu=a100, dtype="bf16")
    assert again.layers == direct.layers and notes


FLAGS = {
    "--bf16": True, "--encoder-num-layers": 12, "--decoder-num-layers": 12,
    "--encoder-seq-length": 512, "--decoder-seq-length": 128, "--hidden-size": 768,
    "--num-attention-heads": 12, "--kv-channels": 64, "--ffn-hidden-size": 3072,
    "--max-position-embeddings": 512, "--micro-batch-size": 4, "--global-batch-size": 32,
    "--tensor-model-parallel-size": 2, "--pipeline-model-parallel-size": 1,
    "--tokenizer-type": "BertWordPieceCase", "--vocab-extra-ids": 100,
    "--transformer-impl": "local",
}  # fmt: skip
"""Megatron-LM's functional test ``t5_mcore_tp2_pp1_vp1`` (tests/functional_tests/test_cases/
t5/, NVIDIA/Megatron-LM@d98e8a64dd), its size and batch flags."""


def test_functional_test_row_end_to_end():
    run = read_megatron(FLAGS, name="t5", source="test", arch="t5", gpu="A100-SXM-80GB",
                        num_gpus=8)  # fmt: skip
    m = t5_shape(run)
    assert (m.encoder_layers, m.decoder_layers, m.encoder_seq, m.decoder_seq) == (12, 12, 512, 128)
    assert m.vocab == 29184  # 28,996 + 100 sentinels, padded to a multiple of 128 x 2
    assert m.attention == "math"  # --transformer-impl local: Megatron's unfused core
    ex = express(run)
    assert isinstance(ex, Expressed), getattr(ex, "reasons", "")
    assert ex.generator == "t5" and ex.point["tensor_parallel"] == 2 and ex.point["dp_width"] == 4
    pred = Predictor().predict(ex)
    assert pred.error == "" and pred.fits and pred.iteration_time_s
    assert pred.allocated_bytes and pred.allocated_bytes > unique_params(m) * 2 / 2


def test_pipeline_refused():
    flags = FLAGS | {"--pipeline-model-parallel-size": 2}
    run = read_megatron(flags, name="t5", source="test", arch="t5", gpu="A100-SXM-80GB",
                        num_gpus=8)  # fmt: skip
    ex = express(run)
    assert isinstance(ex, NotExpressed)
    assert any("pretrain_t5.py:97-98" in r for r in ex.reasons)


def test_model_flops_hand_computed(a100):
    from sim.compute.model_flops import model_flops
    from sim.parallel.shard import model_shape

    # per sample: 6 [s_e L_e (4hq + 2hF + 2q s_e) = 640, s_d L_d (6hq + 2hF + q s_d + 2q s_e)
    # = 400, linear_kv 2hq s_e L_d = 128, logits s_d h V = 80]
    per_sample = 6.0 * (640 + 400 + 128 + 80)
    trace = t5_trace(TINY, name="tiny", microbatch_size=1, gpu=a100, dtype="bf16")
    shape = model_shape(trace)
    assert shape is not None and model_flops(shape, 3) == 3 * per_sample
    # = 3 x the forward kernels' FLOPs less the causal half of the decoder's self-attention core
    assert per_sample == 3 * (sum(x.flops or 0 for x in trace.layers) - 64 / 2)


def test_sweep_skips_pipeline_stages():
    from sim.config import parse_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import Prepared
    from sim.runs.predict import build_trace, experiment_of

    run = read_megatron(FLAGS, name="t5", source="test", arch="t5", gpu="A100-SXM-80GB",
                        num_gpus=8)  # fmt: skip
    ex = express(run)
    assert isinstance(ex, Expressed)
    pred = Predictor()
    topo = pred.topology(ex.hardware)
    spec = experiment_of(ex, ex.hardware, ex.model)
    spec["models"][0] |= {"stages": [1, 2], "tensor_parallel": 2, "global_batch": 32}
    prep = Prepared(parse_experiment(spec), "<t5>", topo, {ex.model: build_trace(ex, topo)})
    points, skipped = expand(prep)
    assert {p.stages for p in points} == {1}
    assert any("pretrain_t5.py:97-98" in why for _, why in skipped)


def test_parameter_tensors(a100):
    from sim.trace.t5 import stage_tensors_t5

    trace = t5_trace(TINY, name="tiny", microbatch_size=1, gpu=a100, dtype="bf16")
    # embedding (0, 2), the last encoder layer (8 + 2 final-norm vectors, 4), a decoder layer
    # (8 + 5, 4 + 3: cross norm, linear_q, linear_kv, linear_proj), head (final norm, bias)
    assert stage_tensors_t5(trace, 0, 4) == (0 + 10 + 13 + 3, 2 + 4 + 7 + 0)
    assert [x.param_tensors for x in trace.layers] == [2, 14, 20, 3]


def test_position_table_not_an_approximation():
    run = read_megatron(FLAGS, name="t5", source="test", arch="t5", gpu="A100-SXM-80GB",
                        num_gpus=8)  # fmt: skip
    ex = express(run)
    assert isinstance(ex, Expressed) and t5_shape(run).positions == 512
    assert not any(a.startswith("max-position-embeddings") for a in ex.approximations)


def test_fused_cross_attention_bytes():
    from sim.compute.t5 import cross_bwd, cross_fwd

    flash = T5Shape(**{**TINY.__dict__, "attention": "flash"})
    core = [k for k in cross_fwd(flash, 1, 2) if k.kind == "attn"][0]
    # Q and O over s_d = 2 tokens, K and V over s_e = 4, width 4, 2 bytes; fp32 LSE b a s_d
    assert core.bytes == (2 * 2 + 2 * 4) * 4 * 2 + 4 * 2 * 2
    back = [k for k in cross_bwd(flash, 1, 2)[0] if k.kind == "attn"][0]
    assert back.bytes == (4 * 2 + 4 * 4) * 4 * 2 + 4 * 2 * 2
