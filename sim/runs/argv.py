"""A launch command as the flags it sets: ``torchrun ... pretrain_gpt.py --tp 8 ...`` ->
``{"tensor-model-parallel-size": "8", ...}``.

Shell syntax is read with :mod:`shlex` (quotes, ``#`` comments, ``\\`` line continuations);
``VAR=value`` assignments before the command, ``python``/``python3``, the launcher
(``torchrun``, ``python -m torch.distributed.run``, ``deepspeed``) and its options are
separated from the training script's flags. A flag followed by another flag (or by nothing) is
a switch (``True``), as argparse's ``store_true``; ``--flag=value`` and ``--flag value`` both
give a value; a value still holding ``$`` is an unexpanded shell variable.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from sim.errors import InputError

LAUNCHERS = ("torchrun", "deepspeed", "torch.distributed.run", "torch.distributed.launch")
"""Commands whose options come before the training script."""
SCRIPT_SUFFIXES = (".py", ".sh")


@dataclass
class Command:
    """A parsed launch command.

    Attributes:
        env: ``VAR=value`` assignments before the command.
        launcher: the launcher's name (``torchrun``, ``deepspeed``), "" when none.
        launcher_flags: the launcher's options (``nproc-per-node``...; ``_`` spelled ``-``).
        script: the training script (``pretrain_gpt.py``), "" when the text is flags only.
        flags: the script's flags, in order, spelled with ``-`` and without the leading
            ``--``; a switch has the value ``True``.
        positional: other words after the script (not flags).
    """

    env: dict[str, str] = field(default_factory=dict)
    launcher: str = ""
    launcher_flags: dict[str, str | bool] = field(default_factory=dict)
    script: str = ""
    flags: dict[str, str | bool] = field(default_factory=dict)
    positional: list[str] = field(default_factory=list)


def _words(text: str, file: str) -> list[str]:
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise InputError(f"cannot split the command line: {exc}", file=file) from None


def _flag_pairs(words: list[str], file: str) -> tuple[dict[str, str | bool], list[str], int]:
    """Flags from ``words`` until the first non-flag word that is a script (its index)."""
    flags: dict[str, str | bool] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--"):
            if w.endswith(SCRIPT_SUFFIXES):
                return flags, rest, i
            rest.append(w)
            i += 1
            continue
        name, eq, value = w[2:].partition("=")
        name = name.replace("_", "-")
        if not name:
            raise InputError(f"empty flag {w!r}", file=file)
        if eq:
            flags[name] = value
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            nxt = words[i + 1]
            if nxt.endswith(SCRIPT_SUFFIXES) and name in ("module",):
                flags[name] = nxt
            elif nxt.endswith(SCRIPT_SUFFIXES):
                flags[name] = True
                return flags, rest, i + 1
            else:
                flags[name] = nxt
            i += 2
        else:
            flags[name] = True
            i += 1
    return flags, rest, len(words)


def parse_command(text: str, *, file: str = "<command>") -> Command:
    """The launch command ``text`` (module doc).

    Raises:
        InputError: unbalanced quotes, an empty flag, nothing after the launcher.

    Example:
        >>> c = parse_command("NCCL_DEBUG=WARN torchrun --nproc_per_node 8 pretrain_gpt.py "
        ...                   "--tensor-model-parallel-size 2 --bf16 --lr=3e-4")
        >>> c.env, c.launcher, c.launcher_flags, c.script, c.flags
        ({'NCCL_DEBUG': 'WARN'}, 'torchrun', {'nproc-per-node': '8'}, 'pretrain_gpt.py', \
{'tensor-model-parallel-size': '2', 'bf16': True, 'lr': '3e-4'})
    """
    words = _words(text, file)
    cmd = Command()
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        cmd.env[key] = value
    if words and words[0].rsplit("/", 1)[-1].startswith("python"):
        words.pop(0)
        if words[:1] == ["-m"] and len(words) > 1:
            words.pop(0)
    if words and words[0].rsplit("/", 1)[-1] in LAUNCHERS:
        cmd.launcher = words.pop(0).rsplit(".", 1)[-1]
        cmd.launcher_flags, _, at = _flag_pairs(words, file)
        words = words[at:]
    if words and not words[0].startswith("--"):
        cmd.script = words.pop(0)
    flags, rest, at = _flag_pairs(words, file)
    cmd.flags, cmd.positional = flags, rest + words[at:]
    return cmd


def is_unexpanded(value: object) -> bool:
    """Whether ``value`` still holds a shell variable (``$TP``, ``${TP}``)."""
    return isinstance(value, str) and "$" in value


def switch_on(value: object) -> bool:
    """Whether a switch flag whose value is ``value`` is on (``flags.get(flag)``: None when
    the flag is absent).

    A switch is Megatron-LM's ``argparse`` ``store_true`` flag (``--sequence-parallel``): given
    on a command line it is on, and :func:`parse_command` records it as ``True``; Megatron-
    Bridge's YAML configs and a log's arguments block write the same setting as a boolean
    (``true``/``false``, ``True``/``False``). Off: absent (None), ``False`` (and so ``0``), or
    the text ``false`` in any letter case; on: anything else (``True``, ``"true"``, ``1``, or
    a word the command line put after the switch).

    Example:
        >>> [switch_on(v) for v in (True, "true", 1, None, False, "false", "False", 0)]
        [True, True, True, False, False, False, False, False]
    """
    if isinstance(value, str):
        return value.lower() != "false"
    return value not in (None, False)
