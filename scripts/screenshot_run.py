"""Render ``sim run experiments/dgx1.yaml`` as a 100-column terminal shows it: docs/img/sim-run.svg
and, with headless Chromium (Debian's ``chromium``), docs/img/sim-run.png.

The answer and the notes are recorded by one rich console of 100 columns that believes it is a
terminal (``Console(record=True, width=100, force_terminal=True)``); the notes go through the
same logging handler ``sim`` uses on a terminal (:func:`sim.cli.console.setup_logging`).
Progress bars are off (they are transient on a terminal).

    python scripts/screenshot_run.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from sim import api  # noqa: E402
from sim.cli.console import setup_logging  # noqa: E402

WIDTH = 100
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
"""How this machine's Chromium runs without a screen or a network (env/machines/python.md)."""


def record(out_dir: Path) -> Path:
    """Run the experiment into a scratch folder with a recording console; save the SVG."""
    console = Console(
        record=True,
        width=WIDTH,
        force_terminal=True,
        color_system="truecolor",
        file=io.StringIO(),
    )
    setup_logging(console=console)
    with tempfile.TemporaryDirectory() as tmp:
        api.run(
            ROOT / "experiments" / "dgx1.yaml",
            out=Path(tmp) / "dgx1",
            jobs=2,
            console=console,
            progress=False,
            plots=False,
        )
    svg = out_dir / "sim-run.svg"
    console.save_svg(str(svg), title="sim run experiments/dgx1.yaml")
    return svg


def to_png(svg: Path, chromium: str) -> Path:
    """Screenshot ``svg`` with headless Chromium at its own size."""
    text = svg.read_text()
    head = text[: text.index(">")]
    width = float(head.split('viewBox="0 0 ')[1].split()[0])
    height = float(head.split('viewBox="0 0 ')[1].split()[1].rstrip('"'))
    png = svg.with_suffix(".png")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={int(width) + 1},{int(height) + 1}",
                svg.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return png


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    svg = record(args.out)
    print(f"wrote {svg}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium: apt-get install -y chromium, then run this again for the PNG")
        return
    print(f"wrote {to_png(svg, chromium)}")


if __name__ == "__main__":
    main()
