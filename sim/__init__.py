"""pipesim: a discrete-event simulator of pipeline-parallel training on multi-GPU servers.

The simulator never imports torch; ``backends/torch`` does, lazily.
"""

__version__ = "0.1.0"
