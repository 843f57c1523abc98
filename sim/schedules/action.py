"""The action IR shared by every schedule, the engine and the torch replay.

An :class:`Action` is ``(stage, op, microbatch)`` written exactly as torch.distributed.pipelining
writes it: ``"2F0"`` is stage 2, forward, micro-batch 0 (schedules.md §4.1). ``op`` is one of

* ``F`` forward, ``B`` full backward, ``I`` backward-input, ``W`` backward-weight (torch's ops);
* ``STEP`` the optimizer step of that stage; its ``microbatch`` field holds the optimizer-step
  number (0, 1, ...). It is ours (torch inserts ``REDUCE_GRAD`` itself) and is never written to
  torch CSVs.

Micro-batch indices are global across iterations: iteration ``k`` of a schedule with ``m``
micro-batches per iteration owns micro-batches ``k*m .. k*m+m-1``. A CSV for torch holds one
iteration (``0 .. m-1``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

COMPUTE_OPS = ("F", "B", "I", "W")
STEP = "STEP"
_ACTION_RE = re.compile(r"^\s*(\d+)(F|B|I|W|STEP)(\d+)\s*$")


class Action(NamedTuple):
    """One action of a per-rank program.

    Attributes:
        stage: pipeline stage index (0 = first).
        op: ``F``, ``B``, ``I``, ``W`` or ``STEP``.
        microbatch: global micro-batch index (for ``STEP``: the optimizer-step number).
    """

    stage: int
    op: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.microbatch}"

    @classmethod
    def from_str(cls, text: str) -> Action:
        """Parse ``"2F0"`` (torch's compact form) or ``"0STEP1"``.

        Raises:
            ValueError: the text is not an action.

        Example:
            >>> Action.from_str("2F0"), str(Action(1, "STEP", 3))
            (Action(stage=2, op='F', microbatch=0), '1STEP3')
        """
        m = _ACTION_RE.match(text)
        if not m:
            raise ValueError(f"{text!r} is not an action like '2F0' or '1B3'")
        return cls(int(m.group(1)), m.group(2), int(m.group(3)))


Program = list[list[Action]]
"""Per-rank ordered action lists: ``program[rank]`` is what pipeline rank ``rank`` executes."""
