"""qjit.tune and the qjit-tune command of the installed package, on the tiny stories260K shapes."""

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import qjit
import qjit.tune

BATCHES = [1, 3]
QUICK = dict(batches=BATCHES, budget_ms=10, repeats=3, quiet=True)


def stories260k_shapes():
    """The distinct (K, N) of the bundled stories260K config."""
    config = (Path(qjit.__file__).parent / "models" / "stories260K.yaml").read_text()
    return {(int(k), int(n)) for k, n in re.findall(r"k: (\d+), n: (\d+)", config)}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    return tmp_path_factory.mktemp("tune") / "db.yaml"


@pytest.fixture(scope="module")
def first_run(database):
    return qjit.tune(model="stories260K", tuning_db=database, **QUICK)


def test_tunes_every_distinct_shape_at_every_batch(first_run, database):
    expected = {(k, n, batch) for k, n in stories260k_shapes() for batch in BATCHES}
    assert len(expected) == 10
    assert sorted((row.k, row.n, row.batch) for row in first_run.rows) == sorted(expected)
    for row in first_run.rows:
        assert row.us > 0 and row.gbps > 0
        assert row.source in ("tuned", "hit")  # batch 3 may share batch 1's record
        assert row.default_us > 0 and row.portable_us > 0
        assert row.cuda_us is None
    assert "tuned" in {row.source for row in first_run.rows}
    assert database.is_file()
    assert first_run.threads > 0 and first_run.probe_gbps > 0
    assert "tuning database" in first_run.machine
    assert "| layer | K x N |" in first_run.text and "stories260K layers, 4-bit, group 128" in first_run.text


def test_second_run_hits_the_database_and_compare_false_times_nothing_else(first_run, database):
    second = qjit.tune(model="stories260K", tuning_db=database, compare=False, **QUICK)
    assert [(row.k, row.n, row.batch) for row in second.rows] == [(row.k, row.n, row.batch) for row in first_run.rows]
    assert [row.source for row in second.rows] == ["hit"] * len(first_run.rows)
    assert [row.tiling for row in second.rows] == [row.tiling for row in first_run.rows]
    assert all(row.default_us is None and row.portable_us is None for row in second.rows)


def test_prints_the_table_unless_quiet(database, capsys):
    result = qjit.tune(model="stories260K", tuning_db=database, batches=[1], budget_ms=0, repeats=1, compare=False)
    assert capsys.readouterr().out == result.text
    assert "| layer | K x N |" in result.text


def test_unknown_model_name_lists_the_bundled_ones():
    with pytest.raises(qjit.InvalidArgumentError, match="no-such-model.*llama-2-7b.*stories260K"):
        qjit.tune(model="no-such-model", quiet=True)


@pytest.mark.parametrize("arguments, named", [
    (dict(model="stories260K", bits=5), "bits"),
    (dict(model="stories260K", group_size=100), "group_size"),
    (dict(model="stories260K", batches=[]), "batches"),
    (dict(model="stories260K", batches=[0]), "batches"),
    (dict(model="stories260K", repeats=0), "repeats"),
    (dict(model="stories260K", budget_ms=-1), "budget_ms"),
    (dict(model="stories260K", activations="f16"), "activations"),
    (dict(model="stories260K", checkpoint="."), "model and checkpoint"),
    (dict(checkpoint=".", bits=3), "bits, group_size and symmetric come from the checkpoint"),
])
def test_bad_arguments_raise_invalid_argument_naming_them(arguments, named):
    with pytest.raises(qjit.InvalidArgumentError, match=named):
        qjit.tune(quiet=True, **arguments)


def test_missing_checkpoint_directory_is_an_io_error(tmp_path):
    with pytest.raises(qjit.FileIOError, match="checkpoint"):
        qjit.tune(checkpoint=tmp_path / "absent", tuning_db=tmp_path / "db.yaml", quiet=True)


def test_tool_failure_raises_the_class_of_its_status(tmp_path):
    # An empty directory is no checkpoint: the tool fails in qjit_checkpoint_open with an i/o error.
    with pytest.raises(qjit.FileIOError, match="qjit_checkpoint_open failed: .*config.json") as raised:
        qjit.tune(checkpoint=tmp_path, tuning_db=tmp_path / "db.yaml", quiet=True)
    assert raised.value.status == qjit.FileIOError.status


def test_module_help_lists_json():
    run = subprocess.run([sys.executable, "-m", "qjit.tune", "--help"], capture_output=True, text=True)
    assert run.returncode == 0
    assert "--json" in run.stdout and "--checkpoint" in run.stdout


def test_module_passes_the_tools_exit_status_and_errors():
    run = subprocess.run([sys.executable, "-m", "qjit.tune", "--list", "--json", "x.json"], capture_output=True,
                         text=True)
    assert run.returncode != 0
    assert "excludes" in run.stderr


def test_console_script_runs_the_tool():
    script = Path(sysconfig.get_path("scripts")) / "qjit-tune"
    assert script.is_file()
    run = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and "--json" in run.stdout
