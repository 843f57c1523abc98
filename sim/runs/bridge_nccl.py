"""Which Megatron-Bridge performance rows ran an NCCL older than 2.29.2, and so sent between
servers on 2 p2p channels per peer (:mod:`sim.comm.p2p_net`; the shipped overlay ``nccl-2.28``).

NCCL 2.29.2 was released on 2026-01-07 (NVIDIA/nccl tag ``v2.29.2-1``, commit ebd1e929; PyPI
``nvidia-nccl-cu12`` release history); a container built before cannot ship it. Each release's
container is built on an NGC PyTorch image (``docker/Dockerfile.ci`` ``BASE_IMAGE`` at the tag,
NVIDIA-NeMo/Megatron-Bridge; assumption: the performance container has the CI image's base):

* 25.09 (``v0.1.0rc3``, built on ``ubuntu:24.04``; released before 2.29.2 in any case),
* 25.11 (``v0.2.0``: ``nvcr.io/nvidia/pytorch:25.09-py3``),
* 26.02 and 26.02.01 (``v0.3.0``, ``v0.3.1``: ``pytorch:25.11-py3``)

predate NCCL 2.29.2. From 26.04 (``v0.4.0``: ``pytorch:26.02-py3``) the NCCL version is not known
here, and the presets' NCCL >= 2.29.2 rule stands.

The 14 GB/s per channel of :mod:`sim.comm.p2p_net` is NCCL's figure at its default network chunk
(``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB). Bridge raises that chunk to 2 MiB for some pipelines
(``_set_nccl_pp_comm_chunksize``): Llama 3 70B / 3.1 405B with ``-s 70b|405b`` in 25.09 and 25.11
(``setup_experiment.py`` 75 at ``v0.1.0rc3``, ``perf_plugins.py`` 395 at ``v0.2.0``), their
pretraining in 26.02 (``perf_plugins.py`` 446-451 at ``v0.3.0``), and Llama SFT in 26.02.01 (at
``v0.3.1`` lines 461-468 the SFT assignment overwrites the pretraining one). Those rows keep the
NIC's rate: what a channel moves with larger chunks is not known.
"""

from __future__ import annotations

OVERLAY = "nccl-2.28"
"""The shipped hardware overlay of NCCL before 2.29.2 (``sim/hardware/overlays/nccl-2.28.yaml``)."""
BEFORE_2_29 = frozenset({"25.09", "25.11", "26.02", "26.02.01"})
"""Releases whose container predates NCCL 2.29.2 (module doc)."""
LLAMA_PIPELINES = ("llama3_70b", "llama3.1_405b")
"""Model names (lower case) whose pipeline sends Bridge gives 2 MiB chunks (module doc)."""


def raises_p2p_chunk(release: str, model: str, task: str) -> bool:
    """Whether Bridge's launcher of ``release`` sets ``NCCL_P2P_NET_CHUNKSIZE`` for a row of
    ``model`` (the table's name, e.g. ``"LLAMA3.1_405B"``) and ``task`` (``pretrain``, ``sft``,
    ``lora``), pipeline parallel assumed (module doc).

    >>> raises_p2p_chunk("26.02.01", "LLAMA3.1_405B", "pretrain")
    False
    >>> raises_p2p_chunk("26.02", "LLAMA3.1_405B", "pretrain")
    True
    """
    name = model.strip().lower()
    llama = name.startswith("llama")
    big = name in LLAMA_PIPELINES
    release = release.strip()
    if release in ("25.09", "25.11"):
        return big
    if release == "26.02":
        return big and task == "pretrain"
    if release == "26.02.01":
        return llama and task == "sft"
    return False


def overlay_for(release: str, model: str, task: str) -> str:
    """:data:`OVERLAY` for a row of ``release`` whose container predates NCCL 2.29.2 and whose
    pipeline sends keep NCCL's default chunk, else "" (module doc).

    >>> overlay_for("26.02", "DeepSeekV3", "pretrain"), overlay_for("26.04", "DeepSeekV3", "pretrain")
    ('nccl-2.28', '')
    """
    if release.strip() not in BEFORE_2_29 or raises_p2p_chunk(release, model, task):
        return ""
    return OVERLAY
