"""pipesim: a discrete-event simulator of pipeline-parallel training on multi-GPU servers.

The simulator never imports torch; ``backends/torch`` does, lazily.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pipesim")
    """The installed version: from the git tag by setuptools-scm (pyproject.toml)."""
except PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0.1.0+unknown"
