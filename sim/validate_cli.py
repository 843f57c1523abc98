"""The ``sim validate --single-rank R [--stages P]`` branch of the CLI (:mod:`sim.validate_single`).

Kept out of ``sim/cli.py`` so that the command module stays a list of options. Bad options
raise :class:`sim.errors.InputError` naming the option (the CLI exits 2 with its message).
"""

from __future__ import annotations

from pathlib import Path

import typer

from sim.errors import InputError


def check_options(
    single_rank: int | None, stages: int | None, nproc: int | None, torch_builtin: bool
) -> int:
    """The rank to run, after checking the options that go with ``--single-rank``.

    Raises:
        InputError: ``--stages`` without ``--single-rank``, a negative rank or depth,
            ``--nproc`` other than 1, or ``--torch-builtin``.

    Example:
        >>> check_options(1, 2, None, False)
        1
    """
    if single_rank is None:
        raise InputError("--stages sets the depth of a --single-rank run; add --single-rank R",
                         field="--stages")  # fmt: skip
    if single_rank < 0:
        raise InputError(f"rank {single_rank} must be >= 0", field="--single-rank")
    if stages is not None and stages < 1:
        raise InputError(f"{stages} stages: must be >= 1", field="--stages")
    if nproc not in (None, 1):
        raise InputError(f"a single-rank run is one process, not {nproc}", field="--nproc")
    if torch_builtin:
        raise InputError("torch's schedules run whole pipelines only", field="--torch-builtin")
    return single_rank


def validate_single_rank(
    config: Path,
    single_rank: int | None,
    stages: int | None,
    nproc: int | None,
    device: str,
    schedule: list[str] | None,
    microbatches: list[int] | None,
    iterations: int,
    warmup: int,
    torch_builtin: bool,
    out_dir: Path | None,
) -> None:
    """Run rank ``single_rank`` of ``config`` alone; print and write measured vs predicted.

    Raises:
        InputError: see :func:`check_options` and :func:`sim.validate_single.variants`.
        typer.Exit: code 1 when the run failed, or an action or loss was wrong.
    """
    from sim.cli import _need_torch, err, out

    rank = check_options(single_rank, stages, nproc, torch_builtin)
    _need_torch()
    from backends.torch.launch import ReplayError
    from backends.torch.profile import check_device
    from sim.validate_single import SingleRankSpec, run_single_rank_validation

    check_device(device)
    spec = SingleRankSpec(
        rank=rank,
        stages=stages,
        schedules=tuple(schedule or ()),
        microbatches=tuple(microbatches or ()),
        device=device,
        iterations=iterations,
        warmup_iterations=warmup,
    )

    def row(r: dict) -> None:
        out.print(
            f"  {r['schedule']} rank {r['rank']}/{r['stages']} m={r['microbatches']} "
            f"{r['memory_policy']}: measured {r['measured_iteration_s'] * 1e3:.1f} ms, "
            f"predicted {r['predicted_iteration_s'] * 1e3:.1f} ms ({r['error']:+.1%}); peak "
            f"{r['measured_peak_bytes'] / 2**20:.2f} / {r['predicted_peak_bytes'] / 2**20:.2f} "
            f"MiB ({r['memory_error']:+.1%}); actions "
            f"{'ok' if r['all_actions_done'] and r['losses_finite'] else 'WRONG'}",
            highlight=False,
        )

    try:
        df, dest = run_single_rank_validation(config, spec, out_dir, on_row=row)
    except ReplayError as exc:
        err.print(f"[bold red]replay failed:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    out.print(
        f"mean absolute error: time {df['error'].abs().mean():.1%}, memory "
        f"{df['memory_error'].abs().mean():.1%}  -> {dest}",
        highlight=False,
    )
    if not (df["all_actions_done"].all() and df["losses_finite"].all()):
        err.print("[bold red]the rank did not run all its actions or a loss was not finite[/]")
        raise typer.Exit(1)
