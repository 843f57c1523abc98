"""Multi-stage schedules (v stage chunks per rank): orders against torch 2.13's own generators,
the golden unit-time tables of schedules.md §3, closed forms (§2.6), memory per chunk, and the
sweep's ``virtual_stages`` axis."""

from __future__ import annotations

import pytest

from sim.engine import simulate
from sim.engine.stage_cost import StageCost
from sim.errors import InputError
from sim.metrics import compute_metrics
from sim.schedules import (
    Action,
    DualPipeV,
    Interleaved1F1B,
    InterleavedZeroBubble,
    LoopedBFS,
    ScheduleError,
    ZBVZeroBubble,
    from_csv,
    get_schedule,
    peak_in_flight,
    to_csv_string,
    validate_program,
)
from sim.trace.schema import LayerProfile
from tests.helpers import uniform_input

MULTI = {
    "LoopedBFS": LoopedBFS,
    "Interleaved1F1B": Interleaved1F1B,
    "InterleavedZeroBubble": InterleavedZeroBubble,
    "ZBVZeroBubble": ZBVZeroBubble,
    "DualPipeV": DualPipeV,
}
CASES = [(p, v, m) for p in (1, 2, 3, 4, 8) for v in (2, 3, 4) for m in (1, 3, 4, 6, 8, 9, 16, 17)]


def _torch_order(name: str, p: int, v: int, m: int) -> list[list[str]] | None:
    """torch's ``pipeline_order`` (None padding removed), or None where torch rejects it."""
    vis = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")
    try:
        ops = vis.get_schedule_ops(name, p, m, v)
    except (ValueError, AssertionError, ZeroDivisionError):
        return None
    return [[str(a) for a in rank if a is not None] for rank in ops]


@pytest.mark.parametrize("name", list(MULTI))
def test_orders_equal_torch_generators(name):
    """Every (p, v, m) of CASES: same per-rank order, or both reject (torch's checks)."""
    compared = 0
    for p, v, m in CASES:
        want = _torch_order(name, p, v, m)
        try:
            sched = MULTI[name](p, m, v)
        except ScheduleError:
            assert want is None, (name, p, v, m, "torch accepts it")
            continue
        assert want is not None, (name, p, v, m, "torch rejects it")
        assert [[str(a) for a in sched.rank_order(r)] for r in range(p)] == want, (p, v, m)
        compared += 1
    assert compared >= 20


# schedules.md §3, "Makespan (time units) and bubble fraction": t_F = 1, t_B = 2 (I = W = 1)
# per full stage, chunk times divided by v = 2, free communication.
GOLDEN = {
    "looped_bfs": (28.5, 52.5, 58.5, 106.5),
    "interleaved_1f1b": (28.5, 52.5, 58.5, 106.5),
    "interleaved_zero_bubble": (25.5, 49.5, 51.5, 99.5),
    "zbv_zero_bubble": (25.5, 49.5, 51.5, 99.5),
    "dualpipe_v": (27.0, 51.0, 55.0, 103.0),
}
PM = ((4, 8), (4, 16), (8, 16), (8, 32))


@pytest.mark.parametrize("name", list(GOLDEN))
@pytest.mark.parametrize("case", range(4))
def test_golden_unit_time_makespans(name, case):
    p, m = PM[case]
    log = simulate(uniform_input(name, p, m))
    assert log.iteration_ends_s[0] == pytest.approx(GOLDEN[name][case])


@pytest.mark.parametrize("name", list(GOLDEN))
def test_bubble_fraction_of_one_iteration(name):
    """Bubble = 1 - 3m / makespan (the ideal is 3m) over one flushed iteration, as §3 has it.
    (Over back-to-back iterations a rank may start the next one before the last rank has
    finished this one, so the steady-state period can be shorter: 24.0 for ZB-V.)"""
    p, m = 4, 8
    log = simulate(uniform_input(name, p, m, iterations=1))
    met = compute_metrics(log, stages=p, microbatches=m, synchronous=True, samples_per_step=m)
    assert met.iteration_time_s == pytest.approx(GOLDEN[name][0])
    assert met.bubble_fraction == pytest.approx(1 - 3 * m / GOLDEN[name][0], abs=1e-12)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_interleaved_closed_form(p, v, rounds):
    """schedules.md §2.6: makespan 3m + 3(p-1)/v, so bubble / ideal = (p-1)/(v*m)."""
    m = rounds * p
    makespan = simulate(uniform_input("interleaved_1f1b", p, m, virtual_stages=v)).iteration_ends_s
    assert makespan[0] == pytest.approx(3 * m + 3 * (p - 1) / v)
    assert (makespan[0] - 3 * m) / (3 * m) == pytest.approx((p - 1) / (v * m))


# schedules.md §3, raw peak chunk-micro-batch counts (until W), v = 2.
PEAKS = {
    ("looped_bfs", 4, 8): [16] * 4,
    ("interleaved_1f1b", 4, 8): [11, 9, 7, 5],
    ("interleaved_1f1b", 8, 32): [23, 21, 19, 17, 15, 13, 11, 9],
    ("interleaved_zero_bubble", 8, 16): [16] * 8,
    ("zbv_zero_bubble", 4, 16): [8] * 4,
    ("dualpipe_v", 8, 16): [17] * 8,
}


@pytest.mark.parametrize(("name", "p", "m"), list(PEAKS))
def test_peak_in_flight_table(name, p, m):
    assert peak_in_flight(get_schedule(name)(p, m).program(1)) == PEAKS[(name, p, m)]


@pytest.mark.parametrize("v", [2, 3])
def test_interleaved_peak_formula_and_ledger(v):
    """Peak on rank r: 2(p-r-1) + (v-1)p + 1 chunk-micro-batches (§2.6); the engine's memory
    ledger holds v chunk weights plus that many chunk stashes."""
    p, m, A, W = 4, 8, 1000.0, 50.0
    want = [2 * (p - r - 1) + (v - 1) * p + 1 for r in range(p)]
    assert peak_in_flight(Interleaved1F1B(p, m, v).program(1)) == want
    log = simulate(
        uniform_input("interleaved_1f1b", p, m, act_bytes=A, weight_bytes=W, virtual_stages=v)
    )
    for r in range(p):
        assert log.meta["peak_bytes"][f"gpu{r}"] == pytest.approx(v * W + want[r] * A)


@pytest.mark.parametrize("name", list(GOLDEN))
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (3, 9)])
def test_programs_valid_over_iterations(name, p, m):
    sched = get_schedule(name)(p, m)
    owner = [sched.stage_rank(s) for s in range(sched.num_stages)]
    validate_program(sched.program(3), p, m, 3, stage_ranks=owner)
    assert sorted(owner) == [r for r in range(p) for _ in range(sched.virtual_stages)]


def test_v_placement():
    assert [ZBVZeroBubble(4, 8).stage_rank(s) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert Interleaved1F1B(4, 8, 3).rank_stages(1) == [1, 5, 9]
    assert DualPipeV(4, 8).rank_stages(0) == [0, 7]


@pytest.mark.parametrize(
    ("name", "p", "m", "v", "match"),
    [
        ("interleaved_1f1b", 4, 8, 1, "virtual_stages"),
        ("zbv_zero_bubble", 4, 8, 3, "exactly 2"),
        ("dualpipe_v", 4, 7, 2, "2p = 8"),
        ("interleaved_zero_bubble", 4, 9, 2, "multiple of the number of rounds"),
        ("1f1b", 4, 8, 2, "exactly 1"),
    ],
)
def test_constraints(name, p, m, v, match):
    with pytest.raises(ScheduleError, match=match):
        get_schedule(name)(p, m, v)


def test_overlap_pair_csv_round_trip_and_torch_parses_it():
    program = DualPipeV(4, 8).one_iteration()
    text = to_csv_string(program)
    assert "(7F4;0B0)OVERLAP_F_B" in text.splitlines()[0]
    import io

    assert from_csv(io.StringIO(text)) == program
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    parsed = [[schedules._Action.from_str(c) for c in row.split(",")] for row in text.splitlines()]
    assert [[str(a) for a in row] for row in parsed] == [
        row.split(",") for row in text.splitlines()
    ]


@pytest.mark.parametrize("name", ["interleaved_1f1b", "interleaved_zero_bubble", "zbv_zero_bubble"])
def test_torch_validates_our_csv(name):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    sched = get_schedule(name)(4, 8)
    rows = to_csv_string(sched.one_iteration()).splitlines()
    actions = {
        r: [schedules._Action.from_str(c) for c in row.split(",")] for r, row in enumerate(rows)
    }
    schedules._validate_schedule(actions, 4, sched.num_stages, 8)


def test_overlap_pair_waits_for_both_inputs():
    """A pair whose forward is ready but whose backward waits starts when both are ready:
    without that rule DualPipeV p=4, m=8 would finish at 25.5, not torch's 27 (§3)."""
    assert str(Action.pair(Action(1, "F", 0), Action(0, "B", 0))) == "(1F0;0B0)OVERLAP_F_B"
    assert simulate(uniform_input("dualpipe_v", 4, 8)).iteration_ends_s[0] == pytest.approx(27.0)


def test_stage_cost_split_from_trace_or_default():
    split = LayerProfile("a", 1.0, 2.0, 0, 0, 0, bwd_input_s=0.5, bwd_weight_s=1.5)
    plain = LayerProfile("b", 1.0, 2.0, 0, 0, 0)
    cost = StageCost.from_layers((split, split), 0.0)
    assert (cost.input_s, cost.weight_s, cost.has_split) == (1.0, 3.0, True)
    cost = StageCost.from_layers((split, plain), 0.0)
    assert (cost.input_s, cost.weight_s, cost.has_split) == (2.0, 2.0, False)


def _experiment(tmp_path, sweep: str) -> str:
    path = tmp_path / "e.yaml"
    path.write_text(
        "name: e\nhardware: dgx1-v100-16gb\n"
        "models: [{name: g, trace: gnmt16, global_batch: 64, microbatch_size: 8}]\n"
        f"sweep: {sweep}\n"
    )
    return str(path)


def test_sweep_virtual_stages_axis(tmp_path):
    from sim.config import load_experiment
    from sim.plan.point_row import point_row
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare

    file = _experiment(
        tmp_path,
        "{schedule: [1f1b, interleaved_1f1b, dualpipe_v], stages: 4, virtual_stages: [1, 2]}",
    )
    prep = prepare(load_experiment(file), file)
    points, skipped = expand(prep)
    assert sorted((p.schedule, p.virtual_stages) for p in points) == [
        ("1f1b", 1),
        ("dualpipe_v", 2),
        ("interleaved_1f1b", 2),
    ]
    assert any("exactly 1" in why for _, why in skipped)
    row = point_row(prep, next(p for p in points if p.schedule == "dualpipe_v"))[0]
    assert not row.error and row.virtual_stages == 2 and len(eval(row.boundaries)) == 8
    assert eval(row.placement) == [[0, 1, 2, 3]] or len(eval(row.placement)[0]) == 4


def test_sweep_default_virtual_stages_and_errors(tmp_path):
    from sim.config import load_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare

    file = _experiment(tmp_path, "{schedule: [zbv, 1f1b], stages: 2}")
    points, _ = expand(prepare(load_experiment(file), file))
    assert {(p.schedule, p.virtual_stages) for p in points} == {("zbv", 2), ("1f1b", 1)}
    file = _experiment(tmp_path, "{schedule: dualpipe_v, stages: 8}")  # m = 8 < 2p = 16
    with pytest.raises(InputError, match="2p = 16"):
        expand(prepare(load_experiment(file), file))


def test_a_model_pins_its_own_schedule_and_virtual_stages(tmp_path):
    # Two models under one sweep of 1F1B: "a" keeps the sweep's schedule, "b" pins the
    # interleaved 1F1B with v = 2 and 3 (as experiments/megatron-scaling.yaml pins the SC'21
    # runs' schedules); an unknown schedule in a model is reported under its own field.
    from sim.config import load_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare

    path = tmp_path / "e.yaml"
    models = (
        "models: [{name: a, trace: gnmt16, global_batch: 64, microbatch_size: 8},\n"
        "  {name: b, trace: gnmt16, global_batch: 64, microbatch_size: 8,"
        " schedule: interleaved_1f1b, virtual_stages: [2, 3]}]\n"
    )
    path.write_text(
        f"name: e\nhardware: dgx1-v100-16gb\n{models}sweep: {{schedule: 1f1b, stages: 2}}\n"
    )
    points, _ = expand(prepare(load_experiment(str(path)), str(path)))
    assert sorted((p.model, p.schedule, p.virtual_stages) for p in points) == [
        ("a", "1f1b", 1),
        ("b", "interleaved_1f1b", 2),
        ("b", "interleaved_1f1b", 3),
    ]
    path.write_text(path.read_text().replace("interleaved_1f1b", "zigzag"))
    with pytest.raises(InputError) as err:
        expand(prepare(load_experiment(str(path)), str(path)))
    assert err.value.field == "models.1.schedule.0"
