"""``sim calibrate``'s measurement of this machine's devices, without importing torch first.

Importing this module does not import torch: :func:`calibrate_devices` starts it when it is
called (the command line checks its options with :mod:`backends.torch.devices` first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def calibrate_devices(*, nproc: int, device: str, path: Path) -> dict[str, Any]:
    """Measure ``nproc`` ranks on ``device`` and write the hardware YAML to ``path``
    (:func:`backends.torch.calibrate.hardware.calibrate`).

    Returns:
        The hardware description written (``sim.hardware.spec.HardwareSpec`` fields).
    """
    from backends.torch.calibrate.hardware import calibrate  # starts torch: only when measuring

    return calibrate(nproc=nproc, device=device, path=path).hardware
