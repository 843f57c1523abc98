"""The action IR shared by every schedule, the engine and the torch replay.

An :class:`Action` is ``(stage, op, microbatch)`` written exactly as torch.distributed.pipelining
writes it: ``"2F0"`` is stage 2, forward, micro-batch 0 (schedules.md §4.1). ``op`` is one of

* ``F`` forward, ``B`` full backward, ``I`` backward-input, ``W`` backward-weight (torch's ops);
* ``STEP`` the optimizer step of that stage; its ``microbatch`` field holds the optimizer-step
  number (0, 1, ...). It is ours (torch inserts ``REDUCE_GRAD`` itself) and is never written to
  torch CSVs;
* ``OVERLAP_F_B`` torch's fused pair of a forward and a backward (DualPipeV), written
  ``"(7F4;0B0)OVERLAP_F_B"``: its ``sub_actions`` hold the two, its stage and micro-batch are
  ``-1`` as in torch's ``_Action``. torch's runtime waits for the inputs of both sub-actions
  (``_add_send_recv`` places both receives before the pair), runs them one after the other, then
  sends both outputs; :func:`flatten` lists the sub-actions where only the compute matters.

Micro-batch indices are global across iterations: iteration ``k`` of a schedule with ``m``
micro-batches per iteration owns micro-batches ``k*m .. k*m+m-1``. A CSV for torch holds one
iteration (``0 .. m-1``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

COMPUTE_OPS = ("F", "B", "I", "W")
STEP = "STEP"
OVERLAP = "OVERLAP_F_B"
_ACTION_RE = re.compile(r"^\s*(\d+)(F|B|I|W|STEP)(\d+)\s*$")
_PAIR_RE = re.compile(r"^\s*\(([^;()]+);([^;()]+)\)OVERLAP_F_B\s*$")


class Action(NamedTuple):
    """One action of a per-rank program.

    Attributes:
        stage: pipeline stage index (0 = first); -1 for an ``OVERLAP_F_B`` pair.
        op: ``F``, ``B``, ``I``, ``W``, ``STEP`` or ``OVERLAP_F_B``.
        microbatch: global micro-batch index (for ``STEP``: the optimizer-step number; -1 for
            a pair).
        sub_actions: the (forward, backward) of an ``OVERLAP_F_B`` pair; None otherwise.
    """

    stage: int
    op: str
    microbatch: int
    sub_actions: tuple[Action, ...] | None = None

    def __str__(self) -> str:
        if self.sub_actions is not None:
            return f"({';'.join(map(str, self.sub_actions))}){self.op}"
        return f"{self.stage}{self.op}{self.microbatch}"

    def __repr__(self) -> str:
        return f"Action({str(self)!r})"

    @classmethod
    def pair(cls, forward: Action, backward: Action) -> Action:
        """torch's ``OVERLAP_F_B`` of ``forward`` and ``backward`` (schedules.md §2.8, §4.1).

        Example:
            >>> str(Action.pair(Action(7, "F", 4), Action(0, "B", 0)))
            '(7F4;0B0)OVERLAP_F_B'
        """
        return cls(-1, OVERLAP, -1, (forward, backward))

    def shifted(self, first: int) -> Action:
        """This action with its micro-batch index (and its sub-actions') moved up by ``first``."""
        if self.sub_actions is not None:
            return Action.pair(*(a.shifted(first) for a in self.sub_actions))
        return Action(self.stage, self.op, self.microbatch + first)

    @classmethod
    def from_str(cls, text: str) -> Action:
        """Parse ``"2F0"`` (torch's compact form), ``"0STEP1"`` or ``"(7F4;0B0)OVERLAP_F_B"``.

        Raises:
            ValueError: the text is not an action.

        Example:
            >>> Action.from_str("2F0"), str(Action(1, "STEP", 3))
            (Action('2F0'), '1STEP3')
            >>> Action.from_str("(7F4;0B0)OVERLAP_F_B").sub_actions
            (Action('7F4'), Action('0B0'))
        """
        pair = _PAIR_RE.match(text)
        if pair:
            forward, backward = (cls.from_str(x) for x in pair.groups())
            if forward.op != "F" or backward.op not in ("B", "I"):
                raise ValueError(f"{text!r}: an OVERLAP_F_B pair is (forward;backward)")
            return cls.pair(forward, backward)
        m = _ACTION_RE.match(text)
        if not m:
            raise ValueError(f"{text!r} is not an action like '2F0' or '1B3'")
        return cls(int(m.group(1)), m.group(2), int(m.group(3)))


Program = list[list[Action]]
"""Per-rank ordered action lists: ``program[rank]`` is what pipeline rank ``rank`` executes."""


def flatten(actions: Iterable[Action]) -> Iterator[Action]:
    """The actions with every ``OVERLAP_F_B`` pair replaced by its sub-actions, in order."""
    for a in actions:
        if a.sub_actions is not None:
            yield from a.sub_actions
        else:
            yield a
