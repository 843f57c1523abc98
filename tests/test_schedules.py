"""Schedules: orders against torch 2.13 (schedules.md Appendix and the runtime loops), closed
forms for in-flight micro-batches, weight versions and staleness (§1), validation, CSV, grid."""

from __future__ import annotations

import io
import math
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InputError
from sim.schedules import (
    SCHEDULES,
    STEP,
    Action,
    GPipe,
    OneFOneB,
    PipeDream,
    PipeDream2BW,
    PipeMare,
    ScheduleError,
    check_deadlock_free,
    delay_steps,
    format_grid,
    from_csv,
    get_schedule,
    grid_table,
    peak_in_flight,
    schedule_names,
    to_csv,
    to_csv_string,
    validate_program,
)

ALL = (GPipe, OneFOneB, PipeDream2BW, PipeDream, PipeMare)

# schedules.md Appendix, "Schedule1F1B, p=4, m=8" (torch's _get_pipeline_order IR), verbatim.
TORCH_1F1B_P4_M8 = """\
Step 00: 0F0          1F0          2F0          3F1
Step 01: 0F1          1F1          2F1          3B0
Step 02: 0F2          1F2          2B0          3F2
Step 03: 0F3          1B0          2F2          3B1
Step 04: 0B0          1F3          2B1          3F3
Step 05: 0F4          1B1          2F3          3B2
Step 06: 0B1          1F4          2B2          3F4
Step 07: 0F5          1B2          2F4          3B3
Step 08: 0B2          1F5          2B3          3F5
Step 09: 0F6          1B3          2F5          3B4
Step 10: 0B3          1F6          2B4          3F6
Step 11: 0F7          1B4          2F6          3B5
Step 12: 0B4          1F7          2B5          3F7
Step 13: 0B5          1B5          2F7          3B6
Step 14: 0B6          1B6          2B6          3F8
Step 15: 0B7          1B7          2B7          3B7
Step 16: 0REDUCE_GRAD 1REDUCE_GRAD 2REDUCE_GRAD 3REDUCE_GRAD
"""

# schedules.md Appendix, "ScheduleGPipe, p=4, m=8", verbatim.
TORCH_GPIPE_P4_M8 = "".join(
    f"Step {i:02d}: " + " ".join(f"{r}F{i}" for r in range(4)) + "\n" for i in range(8)
) + "".join(f"Step {i + 8:02d}: " + " ".join(f"{r}B{i}" for r in range(4)) + "\n" for i in range(8))
TORCH_GPIPE_P4_M8 += "Step 16: 0REDUCE_GRAD 1REDUCE_GRAD 2REDUCE_GRAD 3REDUCE_GRAD\n"


def parse_table(text: str) -> list[list[str]]:
    """Columns of an Appendix table; torch's REDUCE_GRAD is our STEP0."""
    rows = [line.split(":", 1)[1].split() for line in text.splitlines()]
    return [[row[r].replace("REDUCE_GRAD", "STEP0") for row in rows] for r in range(len(rows[0]))]


def strs(program) -> list[list[str]]:
    return [[str(a) for a in rank] for rank in program]


def schedule_cases(max_p: int = 8, max_m: int = 32):
    """(class, p, m) with m >= p where the class needs it."""
    return st.sampled_from(ALL).flatmap(
        lambda cls: st.integers(1, max_p).flatmap(
            lambda p: st.tuples(
                st.just(cls), st.just(p), st.integers(p if cls.needs_m_ge_p else 1, max_m)
            )
        )
    )


# --- orders ----------------------------------------------------------------------------------


def test_1f1b_matches_torch_table_with_rank3_corrected():
    expected = parse_table(TORCH_1F1B_P4_M8)
    # Pitfall §5: the IR labels rank 3's forwards 3F1..3F8; the runtime runs 3F0..3F7.
    expected[3] = [f"3F{int(a[2:]) - 1}" if a[1] == "F" else a for a in expected[3]]
    assert expected[3][:4] == ["3F0", "3B0", "3F1", "3B1"]
    assert strs(OneFOneB(4, 8).program(1)) == expected


def test_gpipe_matches_torch_table():
    assert strs(GPipe(4, 8).program(1)) == parse_table(TORCH_GPIPE_P4_M8)


def test_flushed_schedules_repeat_per_iteration():
    for cls in (GPipe, OneFOneB):
        two = cls(3, 4).program(2)[1]
        first = [a for a in two if a.microbatch < 4 and a.op != STEP]
        assert first == [a for a in cls(3, 4).program(1)[1] if a.op != STEP]
        assert two.index(Action(1, STEP, 0)) == len(first)  # flush: step before iteration 1


def test_async_orders_do_not_flush():
    # 2BW, p=2, m=2, two iterations: F2 (iteration 1) starts before iteration 0's last B.
    rank0 = [str(a) for a in PipeDream2BW(2, 2).program(2)[0]]
    assert rank0 == ["0F0", "0F1", "0B0", "0F2", "0B1", "0STEP0", "0F3", "0B2", "0B3", "0STEP1"]
    assert [str(a) for a in PipeDream(2, 1).program(2)[0]] == [
        "0F0", "0F1", "0B0", "0STEP0", "0B1", "0STEP1",
    ]  # fmt: skip
    # PipeMare, p=2, m=2: stage 1 runs 2(p-s)+2 = 4 warm-up forwards, then 1B1F, no flush.
    assert [str(a) for a in PipeMare(2, 2).program(3)[1]] == [
        "1F0", "1F1", "1F2", "1F3", "1B0", "1F4", "1B1", "1STEP0", "1F5", "1B2", "1B3", "1STEP1",
        "1B4", "1B5", "1STEP2",
    ]  # fmt: skip


# --- closed forms (schedules.md §1) ----------------------------------------------------------


def test_peak_in_flight_p4_m8():
    assert peak_in_flight(GPipe(4, 8).program(2)) == [8, 8, 8, 8]
    for cls in (OneFOneB, PipeDream2BW, PipeDream):
        assert peak_in_flight(cls(4, 8).program(3)) == [4, 3, 2, 1], cls.name
    # PipeMare: 2(p-s)+2 in flight (one more than the reference's ~2(p-s)+1, pipemare.py).
    assert peak_in_flight(PipeMare(4, 8).program(3)) == [10, 8, 6, 4]


def test_weight_versions_p4():
    expected = {
        GPipe: [1, 1, 1, 1],
        OneFOneB: [1, 1, 1, 1],
        PipeDream2BW: [2, 2, 2, 2],
        PipeDream: [4, 3, 2, 1],
        PipeMare: [1, 1, 1, 1],
    }
    for cls, versions in expected.items():
        assert [cls(4, 8).weight_versions(s) for s in range(4)] == versions, cls.name
    assert PipeMare(4, 8, discrepancy_correction=True).weight_versions(0) == 2


def test_synchronous_flags():
    assert [cls.synchronous for cls in ALL] == [True, True, False, False, False]


def test_version_rules_say_what_weight_rule_and_synchronous_imply():
    """How the replay keeps weights (``version_rule``) for every registered schedule: two
    versions for ``W(k-1)`` (2BW), a stash where a micro-batch's backward needs its forward's
    version while steps happen in between (PipeDream), one copy otherwise."""
    from sim.schedules import VERSION_RULES

    for name in schedule_names():
        cls = get_schedule(name)
        assert cls.version_rule in VERSION_RULES, name
        if cls.weight_rule == "previous_iteration":
            want = "two_versions"
        elif cls.weight_rule == "forward" and not cls.synchronous:
            want = "stashed"
        else:
            want = "single"
        assert cls.version_rule == want, name
    assert [c.version_rule for c in ALL] == [
        "single",
        "single",
        "two_versions",
        "stashed",
        "single",
    ]


def test_torch_classes_are_named_by_the_schedules():
    """Only GPipe and 1F1B name a torch class run from one stage per rank (torch 2.13's
    ``ScheduleGPipe``, ``Schedule1F1B``); the multi-stage ones replay through the CSV runtime."""
    named = {n: get_schedule(n).torch_class for n in schedule_names()}
    assert {n: c for n, c in named.items() if c} == {
        "gpipe": "ScheduleGPipe",
        "1f1b": "Schedule1F1B",
    }


@settings(max_examples=150, deadline=None)
@given(schedule_cases(), st.integers(1, 3))
def test_valid_and_peak_formulas(case, iterations):
    cls, p, m = case
    sched = cls(p, m)
    program = sched.program(iterations)
    validate_program(program, p, m, iterations, steps=sched.optimizer_steps(iterations))
    n = iterations * m
    want = {GPipe: [m] * p, PipeMare: [min(2 * (p - s) + 2, n) for s in range(p)]}.get(
        cls, [min(p - s, n) for s in range(p)]
    )
    assert peak_in_flight(program) == want
    assert max(peak_in_flight(program)) <= {GPipe: m, PipeMare: 2 * p + 2}.get(cls, p)


@settings(max_examples=100, deadline=None)
@given(schedule_cases(max_m=16))
def test_delay_steps_formulas(case):
    cls, p, m = case
    sched = cls(p, m)
    delays = [sched.delay_steps(s) for s in range(p)]
    if cls.synchronous:
        assert delays == [0] * p
    elif cls is PipeDream:
        assert delays == [p - s - 1 for s in range(p)]
    elif cls is PipeDream2BW:
        assert max(delays) <= 1
        assert delays == [int(p - s - 1 > 0) for s in range(p)]
    else:  # PipeMare: the paper's ceil((2(p-s)+1)/m), measured from the program
        assert delays == [math.ceil((2 * (p - s) + 1) / m) for s in range(p)]
        assert delays == [sched.paper_delay_steps(s) for s in range(p)]


def test_pipedream_delay_on_short_program():
    # Before steady state, delay is bounded by the micro-batches run so far.
    assert delay_steps(PipeDream(4, 1).program(2), 0) == 1
    assert delay_steps(PipeDream(4, 8).program(1), 0) == 3


@pytest.mark.parametrize(
    "p,m,expected",
    [
        # ceil((2(p-s)+1)/m) by hand, s = 0 .. p-1:
        (4, 2, [5, 4, 3, 2]),  # 9/2, 7/2, 5/2, 3/2
        (4, 1, [9, 7, 5, 3]),
        (4, 8, [2, 1, 1, 1]),  # 9/8, 7/8, 5/8, 3/8
        (2, 3, [2, 1]),  # 5/3, 3/3
        (3, 4, [2, 2, 1]),  # 7/4, 5/4, 3/4
        (8, 16, [2, 1, 1, 1, 1, 1, 1, 1]),  # 17/16, 15/16, ...
        (1, 1, [3]),
    ],
)
def test_pipemare_delay_is_the_papers(p, m, expected):
    """Staleness measured from the program equals PipeMare's tau_s (schedules.md §2.5); before
    this schedule kept 2(p-s)+2 in flight it was ceil((p-s-1)/m), e.g. [2, 1, 1, 0] at p=4, m=2."""
    sched = PipeMare(p, m)
    assert [sched.delay_steps(s) for s in range(p)] == expected
    assert [sched.paper_delay_steps(s) for s in range(p)] == expected


@pytest.mark.parametrize("cls", [OneFOneB, PipeDream2BW])
def test_m_less_than_p_raises(cls):
    with pytest.raises(ScheduleError, match="microbatches"):
        cls(4, 3)


@pytest.mark.parametrize("cls", [GPipe, PipeDream, PipeMare])
def test_m_less_than_p_allowed(cls):
    validate_program(cls(4, 2).program(2), 4, 2, 2, steps=cls(4, 2).optimizer_steps(2))


# --- validation must catch broken programs -----------------------------------------------------


def _broken(edit) -> list[list[Action]]:
    program = OneFOneB(2, 2).program(1)
    edit(program)
    return program


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda p: p[0].remove(Action(0, "F", 1)), "0B1 runs before F"),
        (lambda p: p[0].append(Action(0, "B", 1)), "micro-batch 1"),
        (lambda p: p[1].insert(0, p[1].pop(p[1].index(Action(1, "B", 0)))), "before F"),
        (lambda p: p[0].pop(), "STEP"),
        (lambda p: p[1].insert(0, Action(0, "F", 5)), "stage 0"),
        (lambda p: p.pop(), "ranks"),
    ],
)
def test_validate_program_rejects(edit, match):
    with pytest.raises(ScheduleError, match=match):
        validate_program(_broken(edit), 2, 2, 1)


def test_deadlock_detected():
    f0, f1, b0, b1 = (Action(1, op, mb) for op, mb in (("F", 0), ("F", 1), ("B", 0), ("B", 1)))
    program = [
        [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
        [f0, f1, b0, b1],
    ]
    with pytest.raises(ScheduleError, match="deadlock: rank 0 at 0B0, rank 1 at 1F1"):
        check_deadlock_free(program)
    with pytest.raises(ScheduleError, match="deadlock"):
        validate_program(program, 2, 2, 1, steps=0)


# --- registry ----------------------------------------------------------------------------------


def test_registry():
    assert schedule_names()[:5] == ["gpipe", "1f1b", "pipedream_2bw", "pipedream", "pipemare"]
    assert schedule_names()[5:] == [
        "interleaved_1f1b",
        "looped_bfs",
        "interleaved_zero_bubble",
        "zbv_zero_bubble",
        "dualpipe_v",
    ]
    assert get_schedule("pipedream_flush") is OneFOneB
    assert get_schedule("PipeDream-Flush") is OneFOneB
    assert get_schedule("2bw") is PipeDream2BW
    assert get_schedule("GPipe") is GPipe
    assert all(get_schedule(n).name == n for n in schedule_names())
    assert set(schedule_names(aliases=True)) == set(SCHEDULES)
    with pytest.raises(KeyError) as err:
        get_schedule("zb-h1")
    assert "unknown schedule 'zb-h1'" in str(err.value) and "pipedream_2bw" in str(err.value)


# --- CSV ---------------------------------------------------------------------------------------

actions = st.builds(
    Action, st.integers(0, 20), st.sampled_from("FBIW"), st.integers(0, 200), st.none()
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(actions, max_size=12), max_size=6))
def test_csv_round_trip(program):
    assert from_csv(io.StringIO(to_csv_string(program), newline="")) == program


@pytest.mark.parametrize("cls", ALL)
def test_csv_file_round_trip_drops_steps(cls, tmp_path):
    path = tmp_path / "sched.csv"
    program = cls(4, 4).program(1)
    to_csv(program, path)
    assert from_csv(path) == [[a for a in r if a.op != STEP] for r in program]
    assert [p.name for p in tmp_path.iterdir()] == ["sched.csv"]  # no temp file left


def test_from_csv_bubbles_and_errors(tmp_path):
    assert from_csv(io.StringIO("0F0,,0B0\n,1F0,1B0\n")) == [
        [Action(0, "F", 0), Action(0, "B", 0)],
        [Action(1, "F", 0), Action(1, "B", 0)],
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0SEND_F0\n")
    with pytest.raises(InputError, match=r"bad.csv: field 'row 1, column 2'"):
        from_csv(bad)
    with pytest.raises(InputError, match="compute action"):
        from_csv(io.StringIO("0STEP0\n"))
    with pytest.raises(InputError, match="cannot read"):
        from_csv(tmp_path / "missing.csv")


# --- grid --------------------------------------------------------------------------------------


def test_format_grid_matches_appendix():
    grid = format_grid(OneFOneB(4, 8).program(1)).splitlines()
    assert grid[0].split() == ["Rank", "0", "Rank", "1", "Rank", "2", "Rank", "3"]
    assert grid[1].split() == ["Step", "00:", "0F0", "1F0", "2F0", "3F0"]
    assert grid[-1].split()[-1] == "3STEP0" and len(grid) == 18
    gpipe = format_grid(GPipe(4, 8).program(1)).splitlines()[1:]
    want = TORCH_GPIPE_P4_M8.replace("REDUCE_GRAD", "STEP0").splitlines()
    assert [line.split() for line in gpipe] == [line.split() for line in want]
    marked = format_grid(GPipe(2, 1).program(1), error_step=1).splitlines()
    assert marked[2].endswith("<-- ERROR HERE") and "ERROR" not in marked[1]


def test_grid_table():
    table = grid_table(OneFOneB(4, 8).program(1))
    assert len(table.columns) == 5 and table.row_count == 17


def test_sim_never_imports_torch():
    code = "import sys, sim.schedules; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- cross-checks against the installed torch (skipped without it) ------------------------------


def _torch_runtime_order(cls, p: int, m: int, s: int) -> list[str]:
    """Run torch's own ``_step_microbatches`` on a mock stage and record F, B and the step."""
    sched_mod = pytest.importorskip("torch.distributed.pipelining.schedules")
    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.num_stages, stage.stage_index = s, p, p, s
    stage.is_first, stage.is_last, stage.submod = s == 0, s == p - 1, None
    log: list[str] = []
    stage.forward_one_chunk.side_effect = lambda i, *a, **k: log.append(f"{s}F{i}")
    stage.backward_one_chunk.side_effect = lambda i, *a, **k: log.append(f"{s}B{i}")
    stage.perform_reduce_grad.side_effect = lambda *a, **k: log.append(f"{s}STEP0")
    sched = cls(stage, m)
    inputs = ([()] * m, [{}] * m)
    patches = [mock.patch.object(sched_mod, "_batch_p2p", return_value=[])]
    patches.append(mock.patch.object(sched_mod, "_wait_batch_p2p"))
    patches.append(mock.patch.object(cls, "_check_inputs", return_value=inputs))
    for name in ("_initialize_stage", "_maybe_compute_loss", "_maybe_get_loss", "_update_losses"):
        patches.append(mock.patch.object(cls, name))
    for patch in patches:
        patch.start()
    try:
        sched._step_microbatches(*inputs)
    finally:
        mock.patch.stopall()
    return log


@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 2), (3, 5), (4, 8), (4, 16), (8, 8), (8, 13)])
def test_orders_equal_torch_runtime(p, m):
    torch_mod = pytest.importorskip("torch.distributed.pipelining.schedules")
    for ours, theirs in ((OneFOneB, torch_mod.Schedule1F1B), (GPipe, torch_mod.ScheduleGPipe)):
        want = [_torch_runtime_order(theirs, p, m, s) for s in range(p)]
        assert strs(ours(p, m).program(1)) == want, ours.name


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 8), (8, 8)])
def test_torch_parses_and_validates_our_csv(cls, p, m):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    rows = list(to_csv_string(cls(p, m).one_iteration()).splitlines())
    actions = {
        r: [schedules._Action.from_str(c) for c in row.split(",")] for r, row in enumerate(rows)
    }
    assert [[str(a) for a in actions[r]] for r in actions] == [row.split(",") for row in rows]
    schedules._validate_schedule(actions, p, p, m)
    schedules._add_send_recv(actions, lambda stage: stage, p)


@pytest.mark.parametrize(("cls", "p", "m"), [(GPipe, 4, 8), (OneFOneB, 4, 8), (GPipe, 8, 4)])
def test_format_grid_equals_torch(cls, p, m):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    program = cls(p, m).one_iteration()
    order = {
        r: [schedules._Action.from_str(str(a)) for a in acts] for r, acts in enumerate(program)
    }
    assert format_grid(program) == schedules._format_pipeline_order(order)


def _imports(path) -> set[str]:
    """Every ``sim.schedules.X`` module ``path`` imports, at top level or inside a function."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sim.schedules."):
            out.add(node.module.rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            out |= {
                a.name.rsplit(".", 1)[1] for a in node.names if a.name.startswith("sim.schedules.")
            }
    return out


def test_schedule_modules_import_each_other_without_cycles():
    """The modules of sim/schedules form a DAG (no deferred import hides a cycle)."""
    from pathlib import Path

    folder = Path(__file__).parent.parent / "sim" / "schedules"
    graph = {p.stem: _imports(p) for p in folder.glob("*.py") if p.stem != "__init__"}
    assert "base" not in graph["analysis"] and "analysis" in graph["base"]
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle: {' -> '.join((*path, node))}"
        if node not in done:
            for nxt in graph.get(node, ()):
                visit(nxt, (*path, node))
            done.add(node)

    for module in graph:
        visit(module, ())
