"""The one reading of a GPU name (:func:`sim.hardware.gpu_names.read_gpu`): each rule of its
module doc by hand-written names, and the three places that read GPU names through it."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware.gpu_names import GPU_PRESETS, gpu_parts, preset_gpus, read_gpu


@pytest.mark.parametrize(
    ("name", "preset"),
    [("dgx-h100", "dgx-h100"), ("grand-teton-h100", "grand-teton-h100"),
     ("Grand Teton H100", "grand-teton-h100"), ("pcie-8gpu", "pcie-8gpu"),
     ("DGX2_V100", "dgx2-v100")],
)  # fmt: skip
def test_a_preset_name_in_any_case_is_that_preset(name, preset):
    # the grand-teton-h100 and dgx2-v100 presets are not the source default of their GPU
    assert (read_gpu(name).preset, read_gpu(name).how) == (preset, "preset")


@pytest.mark.parametrize(
    ("name", "preset"),
    [("H100-SXM5-96GB", "grand-teton-h100-96gb"), ("h100 sxm5 80gb", "dgx-h100"),
     ("V100-SXM3-32GB", "dgx2-v100"), ("V100_SXM2_32GB", "dgx1-v100-32gb"), ("GH200", "gh200-96gb"),
     ("A100-80GB", "dgx-a100-80gb"), ("A100-SXM4-80GB", "dgx-a100-80gb"), ("B300", "dgx-b300"),
     ("H100 96GB", "grand-teton-h100-96gb"), ("H200 141GB", "dgx-h200"), ("RTX 4090", "pcie-8gpu")],
)  # fmt: skip
def test_a_preset_gpu_model_or_its_parts_is_the_preset_with_it(name, preset):
    # GH200 is the superchip, not the H200 its name contains; SXM3 is the DGX-2's V100
    assert (read_gpu(name).preset, read_gpu(name).how) == (preset, "model")


@pytest.mark.parametrize(
    ("name", "preset"),
    [("H100", "dgx-h100"), ("H100-SXM5", "dgx-h100"), ("A100", "dgx-a100-40gb"),
     ("V100", "dgx1-v100-16gb")],
)  # fmt: skip
def test_several_gpu_models_are_settled_by_the_source_spelling(name, preset):
    # 'H100' is in H100-SXM5-80GB and H100-SXM5-96GB: a source means the 80 GB part by it;
    # 'A100' alone is the 40 GB DGX, 'V100' alone the DGX-1's 16 GB (GPU_PRESETS)
    assert (read_gpu(name).preset, read_gpu(name).how) == (preset, "model")


@pytest.mark.parametrize(
    ("name", "preset"),
    [("A100-SXM-80GB", "dgx-a100-80gb"), ("A100 80 GB", "dgx-a100-80gb"),
     ("A100-80G", "dgx-a100-80gb"), ("NVIDIA H100 80GB HBM3", "dgx-h100"),
     ("NVIDIA H100 96GB", "grand-teton-h100-96gb"), ("H100-HBM2e", "grand-teton-h100-96gb"),
     ("H800", "dgx-h100"), ("NVIDIA A800", "hgx-a800-80gb"),
     ("B200 (8 GPUs, 1 node)", "dgx-b200"), ("NVIDIA GB200", "gb200-nvl72"),
     ("Tesla V100-SXM2-16GB", "dgx1-v100-16gb")],
)  # fmt: skip
def test_a_source_spelling_is_read_by_the_source_table(name, preset):
    assert (read_gpu(name).preset, read_gpu(name).how) == (preset, "source")


@pytest.mark.parametrize(
    ("name", "refused", "reason"),
    [("H100 PCIe", "pcie", "a PCIe card; the presets are SXM servers"),
     ("NVIDIA H100 NVL", "pcie", "a PCIe card; the presets are SXM servers"),
     ("H200_NVL", "pcie", "a PCIe card; the presets are SXM servers"),
     ("A100-PCIE-40GB", "pcie", "a PCIe card; the presets are SXM servers"),
     ("V100-32GB", "several", "matches several GPUs (V100-SXM2-32GB, V100-SXM3-32GB)"),
     ("MI300X", "unknown", "no preset matches it"), ("80GB", "unknown", "no preset matches it"),
     ("", "unknown", "no preset matches it")],
)  # fmt: skip
def test_refusals_say_why(name, refused, reason):
    # 80GB names no GPU (a memory size of four); V100-32GB: the DGX-1's SXM2 or the DGX-2's SXM3
    got = read_gpu(name)
    assert (got.preset, got.how, got.refused, got.reason) == ("", "", refused, reason)


def test_gpu_parts_stop_at_the_first_part_with_a_digit():
    assert gpu_parts("H100-SXM5-80GB") == {"H100"}
    assert gpu_parts("RTX-4090-24GB") == {"RTX", "4090"}


def test_every_source_spelling_names_a_bundled_preset():
    assert {p for _, p in GPU_PRESETS} <= set(preset_gpus())


def test_the_readers_agree_and_name_their_option():
    from sim.cli.gpu_names import gpu_hardware
    from sim.runs.express_hardware import gpu_preset, hardware_for

    assert gpu_preset("H100") == gpu_hardware("H100")[0] == "dgx-h100"
    assert hardware_for("V100-32GB", 8)[1] == (
        "GPU 'V100-32GB': matches several GPUs (V100-SXM2-32GB, V100-SXM3-32GB) (sim hardware list)"
    )
    with pytest.raises(InputError, match=r"--gpu.*a PCIe card.*dgx-h100.*H100-SXM5-80GB"):
        gpu_hardware("H100 PCIe")


def test_for_gpu_reads_the_same_and_names_its_option():
    from backends.torch.profile.fake import resolve_gpu  # imports torch

    assert resolve_gpu("H100")[0] == "dgx-h100" and resolve_gpu("A100 80GB")[0] == "dgx-a100-80gb"
    with pytest.raises(InputError, match=r"--for-gpu.*'H100 PCIe' is a PCIe card.*dgx-h100"):
        resolve_gpu("H100 PCIe")
