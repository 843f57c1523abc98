"""Tests of :mod:`sim.report`: Chrome-trace units and layout, memory replay on hand cases,
every plot writes a PNG, the summary table ranks fitting configurations first."""

from __future__ import annotations

import itertools
import json
import pickle

import pandas as pd
import pytest
from rich.console import Console

from sim.events import Event, EventKind, EventLog, MemoryEvent, Stream
from sim.report import (
    dumps_chrome_trace,
    memory_timeline,
    peak_by_category,
    peak_by_device,
    plot_gantt,
    plot_memory_per_gpu,
    plot_memory_timeline,
    plot_throughput,
    rank_results,
    summary_table,
    to_chrome_trace,
    write_chrome_trace,
)

GIB = 2.0**30
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small_log() -> EventLog:
    """GPipe-like p=2, m=2, two iterations on gpu0/gpu1, one swap to cpu0 (times in ms)."""
    ms = 1e-3
    ev: list[Event] = []
    for k in range(2):
        t0 = k * 10 * ms
        for j in range(2):
            mb = 2 * k + j
            ev.append(
                Event(
                    "compute",
                    "gpu0",
                    "compute",
                    f"0F{mb}",
                    t0 + j * ms,
                    t0 + (j + 1) * ms,
                    stage=0,
                    microbatch=mb,
                    iteration=k,
                )
            )
            ev.append(
                Event(
                    "transfer",
                    "gpu0",
                    "send",
                    f"0F{mb} gpu0->gpu1",
                    t0 + (j + 1) * ms,
                    t0 + (j + 1.2) * ms,
                    stage=0,
                    microbatch=mb,
                    iteration=k,
                    nbytes=4e6,
                    links=("nvlink0-1",),
                )
            )
            ev.append(
                Event(
                    "compute",
                    "gpu1",
                    "compute",
                    f"1F{mb}",
                    t0 + (j + 1.2) * ms,
                    t0 + (j + 2.2) * ms,
                    stage=1,
                    microbatch=mb,
                    iteration=k,
                )
            )
        for j in range(2):
            mb = 2 * k + 1 - j
            ev.append(
                Event(
                    "compute",
                    "gpu1",
                    "compute",
                    f"1B{mb}",
                    t0 + (3.2 + 2 * j) * ms,
                    t0 + (5.2 + 2 * j) * ms,
                    stage=1,
                    microbatch=mb,
                    iteration=k,
                )
            )
            ev.append(
                Event(
                    "compute",
                    "gpu0",
                    "compute",
                    f"0B{mb}",
                    t0 + (5.4 + 2 * j) * ms,
                    t0 + (7.4 + 2 * j) * ms,
                    stage=0,
                    microbatch=mb,
                    iteration=k,
                )
            )
        ev.append(
            Event(
                "recompute",
                "gpu0",
                "compute",
                f"0F{2 * k} (recompute)",
                t0 + 4.4 * ms,
                t0 + 5.4 * ms,
                stage=0,
                microbatch=2 * k,
                iteration=k,
            )
        )
        ev.append(
            Event(
                "swap_out",
                "gpu1",
                "d2h",
                "swap 1F0",
                t0 + 2.2 * ms,
                t0 + 2.8 * ms,
                stage=1,
                microbatch=2 * k,
                iteration=k,
                nbytes=1e6,
                links=("pcie1",),
            )
        )
        ev.append(
            Event(
                "optimizer",
                "gpu0",
                "compute",
                "0STEP0",
                t0 + 9.4 * ms,
                t0 + 9.9 * ms,
                stage=0,
                iteration=k,
            )
        )
        ev.append(
            Event(
                "optimizer",
                "gpu1",
                "compute",
                "1STEP0",
                t0 + 7.2 * ms,
                t0 + 7.7 * ms,
                stage=1,
                iteration=k,
            )
        )
    mem = [
        MemoryEvent(0.0, "gpu0", 2 * GIB, "weights", "w0"),
        MemoryEvent(0.0, "gpu1", 2 * GIB, "weights", "w1"),
        MemoryEvent(1e-3, "gpu0", 1 * GIB, "activations", "stash 0F0"),
        MemoryEvent(2e-3, "gpu0", 1 * GIB, "activations", "stash 0F1"),
        MemoryEvent(2.2e-3, "gpu1", 3 * GIB, "activations", "stash 1F0"),
        MemoryEvent(2.5e-3, "cpu0", 1 * GIB, "swap", "swap 1F0"),
        MemoryEvent(7.4e-3, "gpu0", -1 * GIB, "activations", "stash 0F1"),
        MemoryEvent(9.4e-3, "gpu0", -1 * GIB, "activations", "stash 0F0"),
        MemoryEvent(9.4e-3, "gpu1", -3 * GIB, "activations", "stash 1F0"),
    ]
    return EventLog(
        events=sorted(ev, key=lambda e: e.end_s),
        memory=mem,
        capacity_bytes={"gpu0": 4 * GIB, "gpu1": 6 * GIB, "cpu0": 64 * GIB},
        iteration_ends_s=[9.9e-3, 19.9e-3],
        meta={"schedule": "gpipe", "stages": 2, "tags": {"b", "a"}},
    )


def results_df() -> pd.DataFrame:
    rows = []
    for model in ("gpt-small", "gpt-large"):
        for schedule in ("gpipe", "1f1b"):
            for m in (2, 4, 8, 16):
                for policy in ("none", "recompute"):
                    fits = not (schedule == "gpipe" and m >= 8 and policy == "none")
                    tput = 100.0 * m / (m + 1) * (1.2 if policy == "none" else 1.0)
                    rows.append(
                        dict(
                            model=model,
                            schedule=schedule,
                            stages=4,
                            dp_width=2,
                            microbatch_size=4,
                            microbatches=m,
                            memory_policy=policy,
                            iteration_time_s=32.0 * m / tput / 1e3,
                            throughput_samples_per_s=tput,
                            bubble_fraction=3 / (m + 3),
                            peak_memory_bytes=(10 + m) * GIB,
                            fits=fits,
                        )
                    )
    return pd.DataFrame(rows)


# --- Chrome trace ---------------------------------------------------------------------------


def test_chrome_trace_times_are_microseconds():
    log = small_log()
    spans = [e for e in to_chrome_trace(log)["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(log.events)
    by_key = {(s["name"], s["ts"]): s for s in spans}
    for ev in log.events:
        span = by_key[(ev.name, ev.start_s * 1e6)]
        assert span["ts"] == pytest.approx(ev.start_s * 1e6)
        assert span["dur"] == pytest.approx((ev.end_s - ev.start_s) * 1e6)
        assert span["cat"] == ev.kind


def test_chrome_trace_one_pid_per_device_with_names_and_order():
    doc = to_chrome_trace(small_log(), title="t")
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {0: "gpu0", 1: "gpu1", 2: "cpu0"}  # GPUs in order, then the host
    sort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert sort == {0: 0, 1: 1, 2: 2}
    threads = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert threads == {(0, "compute"), (0, "send"), (1, "compute"), (1, "d2h")}
    tid_of = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for span in (e for e in doc["traceEvents"] if e["ph"] == "X"):
        assert (span["pid"], span["tid"]) in tid_of
        assert span["tid"] >= 1


def test_chrome_trace_args_and_memory_counter():
    doc = to_chrome_trace(small_log())
    send = next(e for e in doc["traceEvents"] if e["name"] == "0F1 gpu0->gpu1")
    assert send["args"] == {
        "kind": "transfer",
        "replica": 0,
        "stage": 0,
        "microbatch": 1,
        "iteration": 0,
        "bytes": 4e6,
        "links": ["nvlink0-1"],
    }
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == 0]
    # gpu0: 2 GiB weights at 0, +1 at 1 ms, +1 at 2 ms, -1 at 7.4 ms, -1 at 9.4 ms
    assert [c["ts"] for c in counters] == pytest.approx([0.0, 1000.0, 2000.0, 7400.0, 9400.0])
    assert [c["args"]["GiB"] for c in counters] == pytest.approx([2.0, 3.0, 4.0, 3.0, 2.0])
    ends = [e["ts"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert ends == pytest.approx([9900.0, 19900.0])


def test_concurrent_spans_on_one_stream_get_separate_threads_and_rows(tmp_path):
    log = small_log()
    # a second send overlapping "0F0 gpu0->gpu1" (1.0 .. 1.2 ms) on the same stream
    log.events.append(Event("transfer", "gpu0", "send", "0B9 gpu0->cpu0", 0.9e-3, 1.1e-3))
    doc = to_chrome_trace(log)
    names = {
        (e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"
    }
    assert (0, "send") in names and (0, "send (2)") in names
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in itertools.pairwise(spans))
    plot_gantt(log, tmp_path / "lanes.png")
    assert_png(tmp_path / "lanes.png")


def test_chrome_trace_is_deterministic_and_written(tmp_path):
    log = small_log()
    shuffled = EventLog(
        list(reversed(log.events)), log.memory, log.capacity_bytes, log.iteration_ends_s, log.meta
    )
    assert dumps_chrome_trace(log) == dumps_chrome_trace(small_log())
    assert dumps_chrome_trace(shuffled) == dumps_chrome_trace(log)
    path = write_chrome_trace(log, tmp_path / "out" / "trace.json", title="demo")
    loaded = json.loads(path.read_text())
    assert loaded["otherData"]["title"] == "demo"
    assert loaded["otherData"]["meta"]["tags"] == ["a", "b"]
    assert path.read_text() == dumps_chrome_trace(log, title="demo")
    assert [p.name for p in path.parent.iterdir()] == ["trace.json"]  # no temp file left


# --- memory ---------------------------------------------------------------------------------


def hand_memory_log() -> EventLog:
    """alloc 3, alloc 5, free 3, alloc 4 on gpu0: peak 9 at t=4."""
    return EventLog(
        memory=[
            MemoryEvent(1.0, "gpu0", 3, "activations", "a"),
            MemoryEvent(2.0, "gpu0", 5, "weights", "w"),
            MemoryEvent(3.0, "gpu0", -3, "activations", "a"),
            MemoryEvent(4.0, "gpu0", 4, "activations", "b"),
        ],
        capacity_bytes={"gpu0": 16, "gpu1": 16},
    )


def test_memory_timeline_is_cumulative_from_zero():
    tl = memory_timeline(hand_memory_log())
    assert tl["gpu0"] == ([0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 3.0, 8.0, 5.0, 9.0])
    assert tl["gpu1"] == ([0.0], [0.0])  # a capacity but no allocations
    assert list(tl) == ["gpu0", "gpu1"]


def test_memory_timeline_sorts_by_time_stably():
    log = EventLog(
        memory=[
            MemoryEvent(2.0, "gpu0", -1, "buffers"),
            MemoryEvent(1.0, "gpu0", 4, "buffers"),
            MemoryEvent(2.0, "gpu0", 2, "buffers"),
        ]
    )
    assert memory_timeline(log)["gpu0"] == ([0.0, 1.0, 2.0, 2.0], [0.0, 4.0, 3.0, 5.0])


def test_peaks_on_hand_case():
    log = hand_memory_log()
    assert peak_by_device(log) == {"gpu0": 9.0, "gpu1": 0.0}
    assert peak_by_category(log, "gpu0") == {"weights": 5.0, "activations": 4.0}
    assert peak_by_category(log, "gpu1") == {}
    with pytest.raises(KeyError):
        peak_by_category(log, "gpu7")


def test_peak_by_category_sums_to_peak_on_small_log():
    log = small_log()
    peaks = peak_by_device(log)
    assert peaks == {"gpu0": 4 * GIB, "gpu1": 5 * GIB, "cpu0": 1 * GIB}
    for dev, peak in peaks.items():
        assert sum(peak_by_category(log, dev).values()) == pytest.approx(peak)
    assert peak_by_category(log, "gpu0") == {"weights": 2 * GIB, "activations": 2 * GIB}


# --- plots ----------------------------------------------------------------------------------


def assert_png(path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000
    assert data[:8] == PNG_MAGIC
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("iteration", [None, 1])
def test_plot_gantt_writes_png(tmp_path, iteration):
    plot_gantt(small_log(), tmp_path / "gantt.png", iteration=iteration)
    assert_png(tmp_path / "gantt.png")


def test_plot_gantt_of_one_iteration_is_drawn_from_its_start():
    """Iteration 1 of small_log runs from 10 ms (its first start) to 19.9 ms (its end) of the
    run: its x-axis was 10-20 ms (absolute; 13,400-26,800 ms on dgx1 read as a bug); it now
    starts at 0, bars and the iteration-end line shifted by 10 ms, the label saying so."""
    ax = plot_gantt(small_log(), iteration=1).axes[0]
    lo, hi = ax.get_xlim()
    assert lo == pytest.approx(0.0)
    assert hi == pytest.approx(9.9 * 1.01)  # 9.9 ms of work and a 1 % pad
    assert "from iteration 1's start" in ax.get_xlabel()
    assert "(ms)" in ax.get_xlabel()
    ends = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() == "iteration end"]
    assert ends == [pytest.approx(9.9)]
    whole = plot_gantt(small_log()).axes[0]
    assert whole.get_xlim()[0] == 0.0 and whole.get_xlabel() == "time (ms)"


def test_plot_gantt_rejects_unknown_iteration(tmp_path):
    with pytest.raises(ValueError, match="iteration 5"):
        plot_gantt(small_log(), tmp_path / "g.png", iteration=5)


def test_memory_plots_write_png(tmp_path):
    plot_memory_per_gpu(small_log(), tmp_path / "mem.png")
    assert_png(tmp_path / "mem.png")
    plot_memory_timeline(small_log(), tmp_path / "timeline.png")
    assert_png(tmp_path / "timeline.png")


@pytest.mark.parametrize("plot", [plot_gantt, plot_memory_per_gpu, plot_memory_timeline])
def test_plots_of_an_empty_log_say_so(tmp_path, plot):
    with pytest.raises(ValueError, match="no .*events"):
        plot(EventLog(), tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_plot_throughput_writes_png_with_non_fitting_rows(tmp_path):
    df = results_df()
    assert not df["fits"].all()
    plot_throughput(df, tmp_path / "tput.png")
    assert_png(tmp_path / "tput.png")
    one_model = df[df["model"] == "gpt-small"]
    plot_throughput(one_model, tmp_path / "tput1.png")
    assert_png(tmp_path / "tput1.png")


def test_plot_throughput_rejects_missing_columns(tmp_path):
    with pytest.raises(ValueError, match="microbatches"):
        plot_throughput(results_df().drop(columns="microbatches"), tmp_path / "x.png")


# --- tables ---------------------------------------------------------------------------------


def test_rank_results_puts_fitting_first_by_throughput():
    ranked = rank_results(results_df())
    fits = ranked["fits"].tolist()
    assert fits == sorted(fits, reverse=True)
    fitting = ranked[ranked["fits"]]["throughput_samples_per_s"].tolist()
    assert fitting == sorted(fitting, reverse=True)


def test_summary_table_columns_and_rows():
    df = results_df()
    table = summary_table(df, top=5)
    assert table.row_count == 5
    headers = [str(c.header) for c in table.columns]
    for header in ("iteration (ms)", "throughput (samples/s)", "bubble (%)", "peak (GiB)", "fits"):
        assert header in headers
    console = Console(record=True, width=220)
    console.print(summary_table(df, top=0))
    text = console.export_text()
    assert "✓" in text and "✗" in text
    best = rank_results(df).iloc[0]
    assert f"{best['throughput_samples_per_s']:,.1f}" in text


def test_an_event_log_pickles_to_the_same_records_of_the_same_types():
    log = small_log()
    log.events.append(
        Event(EventKind.ALLREDUCE, "gpu0", Stream.COMM, "ar", 0.0, 1.0, nbytes=8.0, links=("l0",))
    )
    log.meta["placement"] = {"gpu0": 0}
    back = pickle.loads(pickle.dumps(log))
    assert back == log and type(back) is EventLog
    assert [type(e) for e in back.events] == [Event] * len(log.events)
    assert [type(m) for m in back.memory] == [MemoryEvent] * len(log.memory)
    assert back.events[-1].kind is EventKind.ALLREDUCE and back.events[-1].links == ("l0",)
    assert back.events[-1].duration_s == 1.0


def test_narrow_timeline_bars_keep_their_colour():
    """A bar a pixel wide drawn with the 0.5-pt white edge of wide bars came out white
    (deepseek-v3-256xgb200's all-to-all rows looked empty): bars narrower than EDGE_PX have no
    edge; wide ones keep theirs."""
    from sim.engine import simulate
    from sim.report.gantt import EDGE_PX, plot_gantt
    from tests.helpers import uniform_input

    p, m = 2, 4
    inp = uniform_input("1f1b", p, m, fwd_s=1.0, bwd_s=2.0, out_bytes=1e3, iterations=1)
    log = simulate(inp)
    fig = plot_gantt(log)
    ax = fig.axes[0]
    px_per_ms = ax.get_window_extent().width / (ax.get_xlim()[1] - ax.get_xlim()[0])
    for coll in ax.collections:
        widths_px = [path.get_extents().width * px_per_ms for path in coll.get_paths()]
        if widths_px and max(widths_px) < EDGE_PX:
            assert list(coll.get_linewidths()) == [0.0]
        elif widths_px and min(widths_px) >= EDGE_PX:
            assert list(coll.get_linewidths()) == [0.5]
    assert any(list(c.get_linewidths()) == [0.0] for c in ax.collections)  # the sends
