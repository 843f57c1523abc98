"""This machine's devices for ``sim profile``, ``sim calibrate`` and ``sim validate``.

Importing this module does not import torch: :func:`check_device_name` needs none, and
:func:`check_device` imports it when it is called for a GPU (the command line checks its
options first, then starts torch). Measuring the devices is
:func:`backends.torch.calibrate.devices.calibrate_devices`.
"""

from __future__ import annotations

from sim.errors import InputError


def check_device_name(device: str, *, option: str = "--device") -> None:
    """``cpu``, ``cuda`` or ``cuda:N`` (whether CUDA is there: :func:`check_device`).

    Raises:
        sim.errors.InputError: naming ``option``.

    Example:
        >>> check_device_name("cuda:1")
        >>> check_device_name("mps")
        Traceback (most recent call last):
        ...
        sim.errors.InputError: option '--device': 'mps' is not a device: use cpu, cuda or cuda:N
    """
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise InputError(f"{device!r} is not a device: use cpu, cuda or cuda:N", field=option)


def check_device(device: str, *, nproc: int = 1, option: str = "--device") -> None:
    """Check, before any measurement, that this torch can use ``device`` for ``nproc`` ranks.

    Raises:
        sim.errors.InputError: naming ``option``: not ``cpu``/``cuda``/``cuda:N``; ``cuda`` on
            a torch built without CUDA or with no GPU visible; fewer GPUs than ``nproc``
            (named ``--nproc``) or than the index ``N``.
    """
    check_device_name(device, option=option)
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return
    import torch  # a GPU is asked for: only torch can say whether it is there

    if torch.version.cuda is None:
        raise InputError(
            f"this torch {torch.__version__} was built without CUDA; use --device "
            "cpu or install a CUDA build of torch",
            field=option,
        )
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise InputError(
            "torch has CUDA but sees no GPU (check CUDA_VISIBLE_DEVICES and the "
            "driver); use --device cpu",
            field=option,
        )
    if index and int(index) >= count:
        raise InputError(f"GPU {index} does not exist: {count} visible", field=option)
    if nproc > count:
        raise InputError(f"{nproc} ranks need {nproc} GPUs, {count} visible", field="--nproc")
