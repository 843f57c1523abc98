"""Megatron-Core's ``--pipeline-model-parallel-layout`` as pipesim's fixed stage boundaries.

The layout string names the layers of every pipeline stage, ``|`` between stages, in the order
of the virtual stages (the list's entry ``v * p + r`` is virtual chunk ``v`` of pipeline rank
``r``, so consecutive entries hold consecutive layers): ``E`` the embedding, ``t`` a decoder
layer, ``m`` an MTP layer, ``L`` the loss (the final norm and output layer); ``(...)*n`` and
``x*n`` repeat, commas are cosmetic (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/pipeline_parallel_layer_layout.py``:
``PipelineParallelLayerLayout.parse_str_to_list`` and ``__init__``). pipesim's decoder traces
have one layer per letter in the same order (``embedding``, the blocks, ``mtp.j``, ``head``:
:func:`sim.compute.decoder_shape.layer_names`), so a stage starts at the number of letters
before it: ``options.boundaries`` (virtual stage ``s`` on rank ``s mod p``, as Megatron's).
"""

from __future__ import annotations

import re

KINDS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
"""Megatron's layer letters (``char2layer_type``)."""


def parse_layout(text: str) -> list[str]:
    """The stages of a layout string, each its letters (repetitions unrolled as Megatron's
    ``parse_str_to_list`` does).

    Raises:
        ValueError: a letter Megatron does not know.

    Example:
        >>> parse_layout("Et*3|(tt|)*2mL")
        ['Ettt', 'tt', 'tt', 'mL']
    """
    s = text.strip().replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), s)
    stages = s.split("|")
    bad = sorted({c for st in stages for c in st} - set(KINDS))
    if bad:
        raise ValueError(f"layout {text!r}: unknown layer letters {bad} (Megatron has E, t, m, L)")
    return stages


def layout_boundaries(text: str, layers: int, mtp_layers: int, stages: int) -> tuple[int, ...]:
    """The start layer of each of ``stages`` (``p * v``) stages of a decoder trace with
    ``layers`` blocks and ``mtp_layers`` MTP depths laid out as ``text`` (module doc).

    Raises:
        ValueError: an unknown letter, another number of stages, letters that do not match
            the model (one ``E`` first, one ``L`` last, ``layers`` ``t``, ``mtp_layers``
            ``m``: Megatron's ``validate_layer_layout``), or an empty stage (pipesim's stages
            hold at least one layer).

    Example:
        >>> layout_boundaries("Et*3|(tt|)*2mL", layers=7, mtp_layers=1, stages=4)
        (0, 4, 6, 8)
    """
    parts = parse_layout(text)
    flat = "".join(parts)
    if len(parts) != stages:
        raise ValueError(f"layout {text!r} has {len(parts)} stages, not p x v = {stages}")
    if flat[:1] != "E" or flat[-1:] != "L" or flat.count("E") != 1 or flat.count("L") != 1:
        raise ValueError(f"layout {text!r}: one embedding (E) first and one loss (L) last")
    if flat.count("t") != layers or flat.count("m") != mtp_layers or "t" in flat[flat.find("m") :]:
        raise ValueError(f"layout {text!r} does not hold the model's {layers} decoder and "
                         f"{mtp_layers} MTP layers in order")  # fmt: skip
    if any(not p for p in parts):
        raise ValueError(f"layout {text!r} has an empty stage (pipesim's stages hold a layer)")
    starts, n = [], 0
    for p in parts:
        starts.append(n)
        n += len(p)
    return tuple(starts)


def split_layout(layers: int, stages: int, embedding: bool, loss: bool, mtp_layers: int = 0) -> str:
    """The layout of Megatron's uniform split over ``stages`` (``p * v``) virtual stages when
    ``--account-for-embedding-in-pipeline-split`` (``embedding``) and
    ``--account-for-loss-in-pipeline-split`` (``loss``) count the embedding and the loss as
    layers: ``layers + embedding + loss`` split evenly, the first (last) virtual stage building
    one decoder layer fewer for each (NVIDIA/Megatron-LM@d98e8a64
    ``megatron/core/transformer/transformer_block.py::get_num_layers_to_build``); an embedding
    or loss not counted sits on the first (last) stage beside its layers, the MTP depths on the
    last (Megatron's default placement).

    Raises:
        ValueError: the counted layers do not divide evenly (Megatron asserts it).

    Example:
        >>> split_layout(6, 8, embedding=True, loss=True)
        'E|t|t|t|t|t|t|L'
        >>> split_layout(5, 2, embedding=False, loss=True, mtp_layers=1)
        'Ettt|ttmL'
    """
    n = layers + int(embedding) + int(loss)
    if n % stages:
        raise ValueError(f"{n} layers (with the embedding / loss counted) do not split evenly "
                         f"over {stages} virtual stages (Megatron asserts they do)")  # fmt: skip
    per = n // stages
    letters = ("E" if embedding else "") + "t" * layers + ("L" if loss else "")
    parts = [letters[i * per : (i + 1) * per] for i in range(stages)]
    if not embedding:
        parts[0] = "E" + parts[0]
    if not loss:
        parts[-1] += "L"
    parts[-1] = parts[-1][:-1] + "m" * mtp_layers + "L"
    return "|".join(parts)
