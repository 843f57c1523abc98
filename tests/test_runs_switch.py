"""What counts as on for a Megatron switch flag (sim/runs/argv.py switch_on), and the readers
that share it (Reading.switch, workspace_options, the host-flag options)."""

import pytest

from sim.runs.argv import parse_command, switch_on
from sim.runs.megatron_args import workspace_options
from sim.runs.megatron_host_flags import fill_options, option_value
from sim.runs.megatron_reading import Reading

CASES = [
    (True, True),  # argparse store_true, as parse_command records it
    ("true", True),  # a YAML or log value read as text
    ("True", True),
    (1, True),
    ("1", True),
    ("${EXTRA}", True),  # a word the command line put after the switch
    (None, False),  # absent: flags.get(flag)
    (False, False),  # Bridge's YAML boolean
    ("false", False),
    ("False", False),
    ("FALSE", False),
    (0, False),
]


@pytest.mark.parametrize(("value", "on"), CASES)
def test_switch_on(value, on):
    assert switch_on(value) is on


@pytest.mark.parametrize(("value", "on"), CASES)
def test_the_readers_agree(value, on):
    flags = {} if value is None else {"deterministic-mode": value}
    assert Reading(dict(flags), strict=True).switch("deterministic-mode") is on
    assert ("cublas_workspace_config" in workspace_options(flags)) is on
    assert bool(fill_options(flags | {"attention-backend": "unfused"})) is on
    assert option_value("log-params-norm", value) == ("true" if on else None)


def test_a_switch_on_the_command_line_is_on():
    flags = parse_command(
        "pretrain_gpt.py --sequence-parallel --tensor-model-parallel-size 2"
    ).flags
    assert switch_on(flags.get("sequence-parallel")) and not switch_on(flags.get("bf16"))
