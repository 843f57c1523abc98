"""One exception type for every user-facing input error.

The CLI catches :class:`InputError`, prints its message (which names the file and the
field) and exits with code 2, without a traceback.
"""

from __future__ import annotations

EXIT_OK, EXIT_NOTHING_FITS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
"""``sim`` exit codes: 0 done; 1 some model has no configuration that fits (or an operating
system fault such as a full disk); 2 bad input (one message naming the file or option and
field); 3 an internal error in some points (their rows say ``internal error: ...``; the other
points' results are written)."""


class InputError(Exception):
    """Bad user input: a malformed file, an unknown key, an impossible configuration.

    Args:
        message: what is wrong and how to fix it.
        file: the file the input came from, if any.
        field: the dotted path of the offending field inside that file, if any; or the
            command-line option (``--out``), named as an option.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.message = message
        self.file = file
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}"
        if self.field:
            kind = "option" if self.field.startswith("-") else "field"
            where = f"{where}: {kind} '{self.field}'" if where else f"{kind} '{self.field}'"
        return f"{where}: {self.message}" if where else self.message
