"""Errors in a YAML file name the line where the field is written (sim.textio.field_line),
besides the file, the field and the fix; a key given twice is named with its line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError
from sim.textio import field_line, located

runner = CliRunner()

EXP = """\
name: x
hardware: dgx1-v100-16gb
models:
  - name: a
    trace: gnmt16
    global_batch: 256
sweep:
  schedule: 1f1b
  stages: [2, two]
"""


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("name", 1),
        ("models.0.name", 4),
        ("models.0.global_batch", 6),
        ("sweep.stages", 9),
        ("sweep.dp_width", 7),  # missing: where it belongs (its mapping)
        ("models.3.name", 3),  # no such model: the list
        ("hardware.links.2.bandwidth", 2),  # a preset named: its key
        ("links.0", None),  # nothing of it in the file
    ],
)
def test_field_line(field, line):
    assert field_line(EXP, field) == line


def test_a_path_from_inside_a_hardware_file_is_found_without_its_first_part():
    text = "name: toy\nlinks:\n  - {src: gpu0, dst: gpu1}\n  - {src: gpu1, dst: gpu0}\n"
    assert field_line(text, "hardware.links.1") == 4
    assert field_line("a: [", "a") is None  # does not parse


def _run(tmp_path, text: str):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    return runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o"), "-j", "1"])


def test_a_wrong_value_is_named_with_file_field_and_line(tmp_path):
    res = _run(tmp_path, EXP)
    assert res.exit_code == 2
    assert (
        f"{tmp_path / 'e.yaml'}: field 'sweep.stages' (line 9): [2, 'two'] is not an integer"
        in (res.output)
    )


def test_an_unknown_key_is_named_with_its_line_and_the_fix(tmp_path):
    res = _run(
        tmp_path, EXP.replace("    global_batch: 256\n", "    global_batch: 256\n    colr: 1\n")
    )
    assert res.exit_code == 2
    assert "field 'models.0.colr' (line 7): unknown key (remove it or check its spelling" in (
        res.output
    )


def test_a_key_given_twice_is_named_with_its_line(tmp_path):
    res = _run(tmp_path, EXP.replace("  schedule: 1f1b\n", "  schedule: 1f1b\n  schedule: gpipe\n"))
    assert res.exit_code == 2
    assert "not valid YAML at line 9, column 3: key 'schedule' appears twice" in res.output


def test_an_error_in_a_hardware_file_is_named_with_its_line(tmp_path):
    from sim.hardware.loader import _preset_raw

    spec = _preset_raw("pcie-8gpu", file=None, field=None)
    spec["links"][2]["bandwidth"] = 0
    (tmp_path / "toy.yaml").write_text(json.dumps(spec, indent=1))  # JSON is YAML
    line = next(
        i + 1
        for i, text in enumerate((tmp_path / "toy.yaml").read_text().splitlines())
        if '"bandwidth": 0' in text
    )
    res = _run(tmp_path, EXP.replace("dgx1-v100-16gb", "toy.yaml").replace("[2, two]", "2"))
    assert res.exit_code == 2, res.output
    assert f"toy.yaml: field 'links.2.bandwidth' (line {line})" in res.output


def test_located_leaves_errors_without_a_yaml_field_alone(tmp_path):
    option = InputError("bad", field="--out")
    assert located(option) is option
    missing = InputError("bad", file=str(tmp_path / "gone.yaml"), field="name")
    assert located(missing) is missing
    assert str(InputError("bad", file="f.yaml", line=3)) == "f.yaml, line 3: bad"
