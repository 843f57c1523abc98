"""Which bundled preset an unknown hardware name probably meant (the "did you mean" of
``hardware: NAME`` and ``sim hardware show NAME``).

A name is matched, in this order: the same name in other letter case (``DGX-H100``); a server
count without its hyphen (``8xdgx-h100`` -> ``8x-dgx-h100``); presets that start with it
(``dgx-h10`` -> ``dgx-h100``); presets whose GPU is named in it (``H100``, ``dgx-h100-80gb``
-> ``dgx-h100``, ``grand-teton-h100``: a GPU token such as ``h100`` equal to a ``-``-separated
part of the preset's ``gpu.model``, closest name first); else the closest name by
:func:`difflib.get_close_matches`. The GPU match comes before the closest spelling because a
spelling can be one letter from another GPU (``dgx-h100-80gb`` is closest to ``dgx-a100-80gb``).
"""

from __future__ import annotations

import difflib
import re

_GPU_TOKEN = re.compile(r"^[a-z]+[0-9]+[a-z]*$")
"""A part of a name that names a GPU: letters then digits (``h100``, ``gb200``, ``a800``);
``80gb`` (a memory size) and ``dgx`` (no digits) are not."""
_NO_HYPHEN = re.compile(r"^([1-9][0-9]*)x([a-z].*)$")


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[-_\s]+", text.lower()) if t}


def _by_gpu(name: str, gpu_models: dict[str, str]) -> list[str]:
    wanted = {t for t in _tokens(name) if _GPU_TOKEN.match(t)}
    hits = [p for p, model in gpu_models.items() if wanted & _tokens(model)]
    return sorted(hits, key=lambda p: -difflib.SequenceMatcher(None, name.lower(), p).ratio())


def suggest_presets(name: str, gpu_models: dict[str, str], clusters: list[str]) -> list[str]:
    """The presets ``name`` probably meant, best first (at most three; empty when none is
    close).

    Args:
        name: the unknown name as written (not of the ``Nx-PRESET`` / ``nvlDxN-GPU`` forms,
            whose preset part the caller matches).
        gpu_models: every bundled preset and its ``gpu.model`` (``'H100-SXM5-80GB'``).
        clusters: the presets with a network (those ``Nx-PRESET`` takes).

    Example:
        >>> models = {"dgx-a100-80gb": "A100-SXM4-80GB", "dgx-h100": "H100-SXM5-80GB"}
        >>> suggest_presets("dgx-h100-80gb", models, ["dgx-h100"])
        ['dgx-h100']
        >>> suggest_presets("8xdgx-h100", models, ["dgx-h100"])
        ['8x-dgx-h100']
    """
    lower = name.lower()
    same = [p for p in gpu_models if p.lower() == lower]
    if same:
        return same
    several = _NO_HYPHEN.match(lower)
    if several and several.group(2) in clusters:
        return [f"{several.group(1)}x-{several.group(2)}"]
    prefixed = [p for p in gpu_models if p.startswith(lower)]
    return (
        prefixed[:3]
        or _by_gpu(name, gpu_models)[:3]
        or difflib.get_close_matches(lower, list(gpu_models), n=1)
    )
