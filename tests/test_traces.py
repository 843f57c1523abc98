"""Traces: analytic generator, native format, PipeDream reader, loader, shipped files."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InputError
from sim.trace import (
    MODEL_PRESETS,
    LayerProfile,
    Trace,
    available_traces,
    build_shipped,
    load_trace,
    preset_trace,
    read_pipedream,
    read_trace,
    transformer_trace,
    write_trace,
)
from sim.trace.generator import block_act_bytes, block_fwd_flops, block_params
from sim.trace.native import _pandas_rows, _regular_rows

TRACES = Path(__file__).resolve().parents[1] / "traces"
PD = TRACES / "pipedream"
NODE_RE = re.compile(
    r"^(node\d+) -- (.*) -- forward_compute_time=([\d.]+), "
    r"backward_compute_time=([\d.]+), .*parameter_size=([\d.]+)",
    re.M,
)
V100 = {"gpu_model": "V100-SXM2", "peak_flops": 125e12}


def _file_nodes(path: Path) -> list[tuple[str, str, float, float, float]]:
    return [
        (m[1], m[2], float(m[3]), float(m[4]), float(m[5]))
        for m in NODE_RE.finditer(path.read_text())
    ]


def _tiny(**kw) -> Trace:
    args = dict(
        name="tiny",
        layers=2,
        hidden=8,
        heads=2,
        seq_len=4,
        vocab=10,
        microbatch_size=1,
        dtype="fp16",
        gpu_model="X",
        peak_flops=1e12,
        efficiency=0.5,
    )
    args.update(kw)
    return transformer_trace("gpt", **args)


# ---------------------------------------------------------------- generator


def test_tiny_gpt_by_hand():
    t = _tiny()
    assert [layer.name for layer in t.layers] == ["embedding", "block.0", "block.1", "head"]
    # embedding (V + s) h = 14*8 = 112; block 12*64 + 13*8 = 872; head 2h + V h = 96; x 2 B
    assert [layer.param_bytes for layer in t.layers] == [224, 1744, 1744, 192]
    assert t.param_bytes == 3904 and t.parameters == 1952
    blk = t.layers[1]
    # s b h (34 + 5 a s / h) = 32 * 34 + 5 * 2 * 16 = 1248
    assert blk.act_bytes == 1248
    # 24 b s h^2 + 4 b s^2 h = 6144 + 512
    assert blk.flops == 6656
    assert blk.fwd_s == pytest.approx(6656 / 0.5e12, rel=1e-12)
    assert blk.bwd_s == pytest.approx(2 * blk.fwd_s, rel=1e-12)
    assert blk.bwd_input_s + blk.bwd_weight_s == pytest.approx(blk.bwd_s, rel=1e-12)
    assert blk.bwd_weight_s == pytest.approx(6144 / 0.5e12, rel=1e-12)  # GEMMs once
    assert blk.out_bytes == 4 * 8 * 2
    assert t.layers[-1].out_bytes == 0


@pytest.mark.parametrize("b,s,h,a", [(1, 1024, 1600, 25), (4, 512, 1024, 16), (2, 2048, 12288, 96)])
def test_block_formulas_closed_form(b, s, h, a):
    assert block_params(h) == 12 * h * h + 13 * h
    assert block_fwd_flops(b, s, h) == 24 * b * s * h * h + 4 * b * s * s * h
    assert block_act_bytes(b, s, h, a) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)
    # fp32 doubles the 16-bit tensors but not the 1-byte dropout masks
    assert block_act_bytes(b, s, h, a, elem_bytes=4) == 2 * block_act_bytes(b, s, h, a) - (
        2 * s * b * h + a * s * s * b
    )


def test_gpt2_parameter_count():
    t = preset_trace("gpt2-1.5b")
    unique = t.provenance["unique_parameters"]
    assert 1.5e9 <= unique <= 1.6e9
    h, V, s, L = 1600, 50257, 1024, 48
    assert unique == (V + s) * h + L * (12 * h * h + 13 * h) + 2 * h
    assert t.parameters == unique + V * h  # the head's copy of the word embedding
    assert len(t) == L + 2


def test_bert_large_matches_published_count():
    t = preset_trace("bert-large")
    h, V = 1024, 30522
    heads = (h * h + h) + 2 * h + V + (2 * h + 2)  # MLM transform + LN, decoder bias, NSP
    # BertModel (embeddings + 24 blocks + pooler) of bert-large-uncased: 335,141,888 parameters
    assert t.provenance["unique_parameters"] - heads == 335_141_888
    assert t.parameters == t.provenance["unique_parameters"] + V * h


def test_gpt_5b_about_5b():
    t = preset_trace("gpt-5b")
    assert 4.9e9 < 44 * block_params(3072) < 5.1e9
    assert t.provenance["unique_parameters"] == pytest.approx(5.14e9, rel=0.01)


def test_generator_time_uses_peak_and_efficiency():
    a = preset_trace("bert-large", efficiency=0.5, **V100)
    b = transformer_trace(
        "bert",
        name="x",
        microbatch_size=1,
        efficiency=0.25,
        **{k: v for k, v in MODEL_PRESETS["bert-large"].items() if k != "kind"},
        **V100,
    )
    assert b.layers[3].fwd_s == pytest.approx(2 * a.layers[3].fwd_s, rel=1e-12)
    assert a.provenance["inputs"]["efficiency"] == 0.5
    assert a.device == "V100-SXM2"


@pytest.mark.parametrize(
    "bad",
    [dict(hidden=9), dict(layers=0), dict(efficiency=1.5), dict(dtype="int3"), dict(peak_flops=0)],
)
def test_generator_rejects_bad_shapes(bad):
    with pytest.raises(ValueError):
        _tiny(**bad)


def test_unknown_preset():
    with pytest.raises(InputError, match="gpt2-1.5b"):
        preset_trace("gpt-17")


def test_scaled_to_microbatch_is_linear():
    t1 = preset_trace("gpt2-1.5b", microbatch_size=1)
    t4 = t1.scaled_to_microbatch(4)
    assert t4.microbatch_size == 4 and t4.param_bytes == t1.param_bytes
    for a, b in zip(t1.layers, t4.layers, strict=True):
        assert b.fwd_s == pytest.approx(4 * a.fwd_s) and b.bwd_s == pytest.approx(4 * a.bwd_s)
        assert b.act_bytes == 4 * a.act_bytes and b.out_bytes == 4 * a.out_bytes
    # the memory formulas are linear in b, so the blocks' bytes match a generation at b = 4;
    # the kernel model's times are not (small micro-batches are penalised, tests/test_compute.py)
    g4 = preset_trace("gpt2-1.5b", microbatch_size=4)
    for a, b in zip(g4.layers[1:-1], t4.layers[1:-1], strict=True):
        assert a.act_bytes == b.act_bytes and a.fwd_s < b.fwd_s


# ---------------------------------------------------------------- native format


def test_native_round_trip(tmp_path):
    for t in (preset_trace("bert-large"), read_pipedream(PD / "gnmt_large" / "graph.txt")):
        write_trace(t, tmp_path / t.name)
        assert read_trace(tmp_path / f"{t.name}.csv") == t
        assert read_trace(tmp_path / f"{t.name}.yaml") == t


finite = st.floats(min_value=0, max_value=1e18, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(finite, finite, finite, st.one_of(st.none(), finite)), min_size=1, max_size=5
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1).filter(
        lambda s: s.strip() == s
    ),
)
def test_native_round_trip_property(tmp_path_factory, rows, name):
    layers = tuple(
        LayerProfile(f"{name}{i}", a, b, c, a, c, bwd_weight_s=d)
        for i, (a, b, c, d) in enumerate(rows)
    )
    t = Trace("p", layers, 3, "bf16", "dev", {"source": "hypothesis", "date": "2024-01-02"})
    d = tmp_path_factory.mktemp("rt")
    write_trace(t, d / "p.csv")
    assert read_trace(d / "p.csv") == t


def _write_csv(tmp_path, body: str) -> Path:
    write_trace(_tiny(), tmp_path / "t")
    header = "name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes,bwd_input_s,bwd_weight_s,flops\n"
    (tmp_path / "t.csv").write_text(header + body)
    return tmp_path / "t.csv"


@pytest.mark.parametrize(
    "row2,field,what",
    [
        ("h.1,-1,2,3,4,5,,,", "fwd_s", ">= 0"),
        ("h.1,,2,3,4,5,,,", "fwd_s", "missing"),
        ("h.1,1,2,abc,4,5,,,", "param_bytes", "not a number"),
        ("h.1,1,2,3,4,5,,-2,", "bwd_weight_s", ">= 0"),
    ],
)
def test_native_bad_cells(tmp_path, row2, field, what):
    path = _write_csv(tmp_path, f"h.0,1,2,3,4,5,,,\n{row2}\n")
    with pytest.raises(InputError) as e:
        read_trace(path)
    msg = str(e.value)
    assert e.value.file == str(path) and e.value.field == field
    assert str(path) in msg and f"row 2 (layer 'h.1'): {field}" in msg and what in msg


@pytest.mark.parametrize("path", sorted(TRACES.rglob("*.csv")), ids=lambda p: p.stem)
def test_regular_csvs_read_as_pandas_reads_them(path):
    """Shipped traces are read by the csv module (no pandas import), cell for cell as pandas."""
    text = path.read_text()
    assert _regular_rows(text) == _pandas_rows(text, str(path))


@pytest.mark.parametrize(
    "text",
    ["a,b\n1,2,3\n", "a,b\n1\n", "a,a\n1,2\n", "a,b\n  \n1,2\n", "", "\n\n"],
    ids=["long-row", "short-row", "same-names", "blank-spaces", "empty", "blank"],
)
def test_irregular_csvs_are_left_to_pandas(text):
    assert _regular_rows(text) is None


def test_native_short_row_reads_as_before(tmp_path):
    path = _write_csv(tmp_path, "h.0,1,2,3,4,5,,,\nh.1,1,2\n")
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert "row 2 (layer 'h.1')" in str(e.value)


def test_native_structure_errors(tmp_path):
    path = _write_csv(tmp_path, "h.0,1,2,3,4,5,,,\n")
    (tmp_path / "t.csv").write_text("name,fwd_s,bwd_s,param_bytes,act_bytes\nx,1,1,1,1\n")
    with pytest.raises(InputError, match="out_bytes"):
        read_trace(path)
    (tmp_path / "t.csv").write_text("name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes,speed\n")
    with pytest.raises(InputError, match="speed"):
        read_trace(path)
    (tmp_path / "t.yaml").unlink()
    with pytest.raises(InputError, match="sidecar"):
        read_trace(path)


def test_native_sidecar_errors(tmp_path):
    write_trace(_tiny(), tmp_path / "t")
    side = tmp_path / "t.yaml"
    good = side.read_text()
    side.write_text(good + "colour: red\n")
    with pytest.raises(InputError, match="colour"):
        read_trace(side)
    side.write_text(good.replace("microbatch_size: 1", "microbatch_size: -2"))
    with pytest.raises(InputError) as e:
        read_trace(side)
    assert e.value.field == "microbatch_size" and e.value.file == str(side)


# ---------------------------------------------------------------- PipeDream


def test_gnmt_large_fold():
    path = PD / "gnmt_large" / "graph.txt"
    nodes = _file_nodes(path)
    t = read_pipedream(path)
    assert (t.microbatch_size, t.dtype) == (64, "fp32")
    assert "V100" in t.device and "7db6a1c" in t.provenance["source"]
    assert sum(x.fwd_s for x in t.layers) == pytest.approx(sum(n[2] for n in nodes) / 1000)
    assert sum(x.bwd_s for x in t.layers) == pytest.approx(sum(n[3] for n in nodes) / 1000)
    assert t.param_bytes == sum(n[4] for n in nodes)
    assert all(x.out_bytes >= 0 for x in t.layers) and t.layers[-1].out_bytes == 0
    # merging: one layer per node with non-zero time or parameters
    assert len(t) == sum(1 for n in nodes if n[2] or n[3] or n[4]) == 33
    # unmerged: one layer per node, minus the unused __getitem__ outputs PipeDream drops
    edges = re.findall(r"^\t(node\d+) -- (node\d+)", path.read_text(), re.M)
    sinks = {n[0] for n in nodes if n[1].startswith("__getitem__")} - {a for a, _ in edges}
    assert len(read_pipedream(path, merge_zero_cost=False)) == len(nodes) - len(sinks) == 80


def test_vgg16_drops_input_time():
    path = PD / "vgg16" / "graph.txt"
    nodes = _file_nodes(path)
    t = read_pipedream(path)
    input_ms = sum(n[2] + n[3] for n in nodes if n[1].startswith("Input"))
    assert input_ms == pytest.approx(17.972)
    assert t.provenance["input_time_dropped_s"] == pytest.approx(input_ms / 1000)
    total = sum(n[2] + n[3] for n in nodes) - input_ms
    assert sum(x.fwd_s + x.bwd_s for x in t.layers) == pytest.approx(total / 1000)
    assert t.microbatch_size == 128 and t.parameters == 138_357_544


def test_inception_branching_folds_to_chain():
    path = PD / "inception_v3" / "graph.txt"
    nodes = _file_nodes(path)
    t = read_pipedream(path)
    assert t.param_bytes == sum(n[4] for n in nodes)
    assert all(x.out_bytes >= 0 for x in t.layers)
    # inside an Inception block several branches are open at once: many cuts pay for more
    # than the output of the layer before them
    assert sum(x.out_bytes > x.act_bytes for x in t.layers) > 50


def test_inception_out_bytes_brute_force():
    path = PD / "inception_v3" / "graph.txt"
    text = path.read_text()
    act = {
        m[1]: float(m[2])
        for m in re.finditer(
            r"^(node\d+) -- (?!Input).*activation_size="
            r"([\d.]+)",
            text,
            re.M,
        )
    }
    edges = re.findall(r"^\t(node\d+) -- (node\d+)", text, re.M)
    t = read_pipedream(path, merge_zero_cost=False)
    pos = {x.name.split(":")[0]: k for k, x in enumerate(t.layers)}
    assert len(pos) == len(t) == len(_file_nodes(path))
    assert all(pos[a] < pos[b] for a, b in edges)  # a topological order
    for k, layer in enumerate(t.layers):
        crossing = {a for a, b in edges if pos[a] <= k < pos[b]}
        assert layer.out_bytes == sum(act.get(a, 0.0) for a in crossing), layer.name


def _graph(tmp_path, text: str, model: str = "toy") -> Path:
    (tmp_path / model).mkdir()
    p = tmp_path / model / "graph.txt"
    p.write_text(text)
    return p


def _n(i: int, desc: str, f: float, a: float, p: float = 0) -> str:
    return (
        f"node{i} -- {desc} -- forward_compute_time={f}, backward_compute_time={2 * f}, "
        f"activation_size={a}, parameter_size={p}\n"
    )


def test_diamond_fold_exact(tmp_path):
    text = (
        _n(4, "D", 4, 40)
        + _n(3, "B", 3, 20)
        + _n(1, "A", 1, 10, 8)
        + _n(2, "C", 2, 30)
        + "\tnode1 -- node3\n\tnode1 -- node2\n\tnode3 -- node4\n\tnode2 -- node4\n"
    )
    t = read_pipedream(_graph(tmp_path, text), microbatch_size=2)
    assert [x.name for x in t.layers] == ["node1:A", "node2:C", "node3:B", "node4:D"]
    assert [x.out_bytes for x in t.layers] == [10, 40, 50, 0]
    assert [x.fwd_s for x in t.layers] == [0.001, 0.002, 0.003, 0.004]
    assert t.param_bytes == 8 and t.microbatch_size == 2


def test_zero_cost_nodes_merge_into_successor(tmp_path):
    text = (
        _n(1, "Input0", 0, 5)
        + _n(2, "L1", 1, 10)
        + _n(3, "Add", 0, 10)
        + _n(4, "L2", 2, 7)
        + _n(5, "Add", 0, 3)
        + "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n"
        + "\tnode4 -- node5\n"
    )
    t = read_pipedream(_graph(tmp_path, text), microbatch_size=1)
    assert [x.name for x in t.layers] == ["node2:L1", "node4:L2"]
    assert [x.act_bytes for x in t.layers] == [10, 20]  # Input zeroed; trailing Add into L2
    assert [x.out_bytes for x in t.layers] == [10, 0]


@pytest.mark.parametrize(
    "text,needle",
    [
        (_n(1, "A", 1, 1) + "garbage\n", "line 2"),
        (_n(1, "A", -1, 1), "line 1 (node1): forward_compute_time"),
        (_n(1, "A", 1, "[1.0; x]"), "activation_size"),
        (_n(1, "A", 1, 1) + "\tnode1 -- node9\n", "unknown node node9"),
        (_n(1, "A", 1, 1) + _n(2, "B", 1, 1) + "\tnode1 -- node2\n\tnode2 -- node1\n", "cycle"),
    ],
)
def test_pipedream_errors(tmp_path, text, needle):
    path = _graph(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_pipedream(path, microbatch_size=1)
    assert needle in str(e.value) and str(path) in str(e.value)


def test_pipedream_unknown_batch_size(tmp_path):
    path = _graph(tmp_path, _n(1, "A", 1, 1))
    with pytest.raises(InputError, match="microbatch_size"):
        read_pipedream(path)


# ---------------------------------------------------------------- loader and shipped files


def test_load_trace_lookup(tmp_path):
    assert load_trace("gnmt16").name == "gnmt16"
    assert load_trace(TRACES / "vgg16.yaml").name == "vgg16"
    assert load_trace("pipedream/inception_v3").name == "inception_v3"
    shutil.copytree(PD / "vgg16", tmp_path / "vgg16")
    assert len(load_trace("vgg16/graph.txt", base_dir=tmp_path)) == len(load_trace("vgg16"))
    assert {"gnmt16", "vgg16", "gpt2-1.5b", "bert-large", "gpt-5b"} <= set(available_traces())


def test_load_trace_unknown_lists_available():
    with pytest.raises(InputError) as e:
        load_trace("no-such-model", file="experiments/x.yaml", field="model.trace")
    msg = str(e.value)
    assert "experiments/x.yaml" in msg and "model.trace" in msg and "gnmt16" in msg


# GPT shipped traces: (name, blocks L, hidden h), vocab 50257, seq 1024, ffn 4h (traces/*.yaml).
GPT_SHIPPED = [
    ("gpt2-1.5b", 48, 1600),
    ("gpt-5b", 44, 3072),
    ("gpt2-1b", 20, 2048),
    ("gpt3-10b", 50, 4096),
    ("gpt-ds-20b", 25, 8192),
    ("gpt-ds-40b", 50, 8192),
    ("gpt-ds-50b", 62, 8192),
    ("gpt-ds-60b", 75, 8192),
    ("gpt-ds-68b", 66, 9216),
]


def _gpt_parameters(L: int, h: int, V: int = 50257, s: int = 1024) -> int:
    """L blocks of 12h^2 + 13h (Narayanan et al. SC'21), token + position embeddings (V + s)h,
    the final LayerNorm 2h and an untied LM head Vh."""
    return L * (12 * h * h + 13 * h) + (V + s) * h + 2 * h + V * h


def _shipped_ok(t: Trace) -> None:
    for key in ("source", "command", "date", "notes"):
        assert t.provenance.get(key), key
    assert all(not x.problems() for x in t.layers)


@pytest.mark.parametrize("name,L,h", GPT_SHIPPED)
def test_shipped_gpt_traces_have_the_closed_form_size(name, L, h):
    t = load_trace(name)
    assert (len(t), t.parameters) == (L + 2, _gpt_parameters(L, h))
    _shipped_ok(t)


def test_shipped_bert_large_has_the_published_size():
    t = load_trace("bert-large")
    h, V = 1024, 30522
    heads = (h * h + h) + 2 * h + V + (2 * h + 2)  # MLM transform + LN, decoder bias, NSP
    assert len(t) == 24 + 2 and t.parameters == 335_141_888 + heads + V * h  # bert-large-uncased
    _shipped_ok(t)


@pytest.mark.parametrize(
    "name,graph,params", [("gnmt16", "gnmt_large", None), ("vgg16", "vgg16", 138_357_544)]
)
def test_shipped_pipedream_traces_sum_their_profiles(name, graph, params):
    """PipeDream's parameter_size is fp32 bytes: the count is their sum / 4; VGG-16's is the
    published 138,357,544 (torchvision vgg16). One layer per node with time or parameters."""
    t = load_trace(name)
    nodes = _file_nodes(PD / graph / "graph.txt")
    assert t.parameters == sum(n[4] for n in nodes) / 4 == (params or t.parameters)
    assert len(t) == sum(
        1 for n in nodes if (n[2] or n[3] or n[4]) and not n[1].startswith("Input")
    )
    _shipped_ok(t)


def test_shipped_files_match_regeneration(tmp_path):
    build_shipped(tmp_path, pipedream_dir=PD, date="1970-01-01")
    for csv in sorted(tmp_path.glob("*.csv")):
        fresh, shipped = read_trace(csv), load_trace(csv.stem)
        prov = dict(shipped.provenance, date="1970-01-01")
        assert fresh == replace(shipped, provenance=prov), csv.stem
    assert (
        len(list(tmp_path.glob("*.yaml"))) == 57
    )  # 34 + 10 SC'21 + Llama 405B, 70B, 3.1-8B (+ 2 torchtitan kernels) + Qwen3 + 7 memsys


def test_attention_core_fields_for_selective_recompute(tmp_path):
    """Blocks carry the 5as^2b stash and 4bs^2h FLOPs of the attention core; other layers and
    traces without the columns read back as None."""
    b, s, h, a = 2, 128, 64, 4
    t = transformer_trace(
        "gpt",
        name="t",
        layers=1,
        hidden=h,
        heads=a,
        seq_len=s,
        vocab=100,
        microbatch_size=b,
        gpu_model="x",
        peak_flops=1e12,
    )
    block = t.layers[1]
    assert block.attn_core_act_bytes == 5 * a * s * s * b
    assert block.attn_core_flops == 4 * b * s * s * h
    assert t.layers[0].attn_core_act_bytes is None
    assert t.scaled_to_microbatch(4).layers[1].attn_core_act_bytes == 10 * a * s * s * b
    write_trace(t, tmp_path / "t")
    assert "attn_core_act_bytes" in (tmp_path / "t.csv").read_text().splitlines()[0]
    assert read_trace(tmp_path / "t.csv") == t
    plain = Trace(
        "u", (LayerProfile("l0", 1.0, 2.0, 3.0, 4.0, 5.0),), 1, "fp16", "x", {"source": "test"}
    )
    write_trace(plain, tmp_path / "u")
    assert "attn_core" not in (tmp_path / "u.csv").read_text()
    assert read_trace(tmp_path / "u.csv").layers[0].attn_core_flops is None
