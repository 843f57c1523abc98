"""``python -m sim.cli``: the ``sim`` command."""

from sim.cli import app

if __name__ == "__main__":
    app()
