"""``sim validate``: replay a configuration on real devices and compare with the simulator.

One pipeline (:mod:`sim.validate.pipeline`) for six modes (:mod:`sim.validate.spec`): every
rank of a pipeline, tensor-parallel ranks, stage chunks per rank, one rank alone, expert- or
context-parallel ranks (with one process's losses on the same data beside theirs). The replay
itself is a :class:`sim.replay.Replayer` handed in by the caller (the command line hands in
``backends.torch.replay.replayer.TorchReplayer``); nothing here imports a backend or torch.

Modules: :mod:`.spec` (options, modes), :mod:`.variants` (which configurations),
:mod:`.predict` (the simulator's numbers), :mod:`.table` (a ``validation.csv`` row),
:mod:`.measured` (measured timelines), :mod:`.breakdown` (time per rank and op),
:mod:`.staging` (the output set), :mod:`.ground_truth` (committed GPU measurements, no GPU).
"""

from sim.validate.pipeline import Validation, run_validation
from sim.validate.spec import Mode, ValidationSpec

__all__ = ["Mode", "Validation", "ValidationSpec", "run_validation"]
