"""The plain progress lines of sim.progress (logs and CI, where stderr is not a terminal)."""

from __future__ import annotations

import io

from rich.console import Console

from sim.progress import progress, remaining_text


def test_the_last_line_is_printed_once(capsys):
    plain = Console(file=io.StringIO(), force_terminal=False)
    with progress(3, "drawing", "files", console=plain, enabled=True) as on_done:
        for n in (1, 3, 3, 3):  # the end reported by a child and by the parent
            on_done(n)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["drawing: 3/3 files (100%)"]


def test_nothing_is_printed_when_disabled(capsys):
    with progress(3, "drawing", console=Console(file=io.StringIO()), enabled=False) as on_done:
        on_done(3)
    assert capsys.readouterr().err == ""


def test_remaining_time_from_the_rate_so_far():
    assert remaining_text(0, 10, 5.0) == ""
    assert remaining_text(5, 10, 5.0) == "about 5 s left"  # half done in 5 s
