"""One exception type for every user-facing input error.

The CLI catches :class:`InputError`, prints its message (which names the file and the
field) and exits with code 2, without a traceback.
"""

from __future__ import annotations


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
