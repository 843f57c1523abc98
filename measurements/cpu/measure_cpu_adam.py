"""Measure this host's CPU Adam rate and write ``measurements/cpu/cpu_adam.yaml`` with provenance.

Run from the repository root: ``.venv/bin/python measurements/cpu/measure_cpu_adam.py``.
Uses :func:`backends.torch.calibrate.rank.cpu_adam_rate` (``torch.optim.Adam(fused=True)`` on CPU
where supported, else ``foreach``), for several parameter counts and all host threads.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.torch.calibrate.rank import cpu_adam_rate  # noqa: E402
from backends.torch.profile.layers import cpu_model_name  # noqa: E402


def main() -> None:
    runs = [
        cpu_adam_rate(params=n, reps=7, threads=os.cpu_count() or 1) for n in (2**20, 2**22, 2**24)
    ]
    out = {
        "what": "CPU Adam step rate (parameters per second) of torch.optim.Adam on this host",
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
        "torch": str(torch.__version__),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python measurements/cpu/measure_cpu_adam.py",
        "notes": "median of 7 steps after 2 warm-up steps, fp32 params/grads/moments; the "
        "machine's 2 cores were shared with other jobs, so the rate is noisy (a lower "
        "bound of the idle rate).",
        "runs": [
            {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in r.items()}
            for r in runs
        ],
    }
    path = Path(__file__).resolve().parent / "cpu_adam.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False))
    print(path.read_text())


if __name__ == "__main__":
    main()
