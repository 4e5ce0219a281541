"""A user's text files — specs, configs, traces, catalogs — are read one way
(:func:`budgeteer.textfile.read_text`): bytes that are not UTF-8, a file over the limit, a pipe
that would be, each is an error naming the file and the line, never a traceback; a config
that is not a regular file (``/dev/null``, a pipe) resolves relative paths from the working
folder, not from ``/dev``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from budgeteer.catalog import load_catalog
from budgeteer.config import load_config
from budgeteer.errors import CatalogError, SpecError
from budgeteer.spec.files import read_document
from budgeteer.textfile import TextFileProblem, read_text
from budgeteer.traces import TraceError, load_trace
from test_cli import budgeteer

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "src" / "budgeteer" / "examples"


def test_read_text_names_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\nb: 2\nc: \xff\n")
    with pytest.raises(TextFileProblem, match=r"^not UTF-8 text: byte 0xff on line 3$"):
        read_text(path, 100)
    path.write_bytes("é: ü\n".encode())
    assert read_text(path, 100) == "é: ü\n"
    with pytest.raises(TextFileProblem, match=r"^larger than 5 bytes$"):
        read_text(path, 5)  # 8 bytes
    assert read_text(path, 8) == "é: ü\n"
    with pytest.raises(TextFileProblem, match=r"^cannot read: No such file or directory$"):
        read_text(tmp_path / "missing", 100)
    with pytest.raises(TextFileProblem, match=r"^cannot read: Is a directory$"):
        read_text(tmp_path, 100)


def test_a_pipe_is_held_to_the_limit_too(tmp_path: Path) -> None:
    """A pipe's size is unknown to ``stat`` (0): the limit is on what is read."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def write(data: bytes) -> None:
        try:
            with fifo.open("wb") as fh:
                fh.write(data)
        except BrokenPipeError:  # the reader stopped at the limit
            pass

    writer = threading.Thread(target=write, args=(b"x" * 5000,))
    writer.start()
    with pytest.raises(TextFileProblem, match="larger than 1000 bytes"):
        read_text(fifo, 1000)
    writer.join(timeout=10)
    writer = threading.Thread(target=write, args=(b"name: piped\n",))
    writer.start()
    assert read_text(fifo, 1000) == "name: piped\n"
    writer.join(timeout=10)


def test_each_reader_names_its_file(tmp_path: Path) -> None:
    spec = tmp_path / "jobs.yaml"
    spec.write_bytes(b"- name: a\n  team: \xfe\n")
    with pytest.raises(SpecError) as spec_err:
        read_document(spec)
    assert (spec_err.value.field, spec_err.value.source) == ("(file)", str(spec))
    assert spec_err.value.problem == "not UTF-8 text: byte 0xfe on line 2"

    trace = tmp_path / "t.json"
    trace.write_bytes(b'{"metadata": {"gap_seconds": 60},\n "data": [1, \xff]}')
    with pytest.raises(TraceError) as trace_err:
        load_trace(trace)
    assert (trace_err.value.file, trace_err.value.field) == (str(trace), "(file)")
    assert trace_err.value.problem == "not UTF-8 text: byte 0xff on line 2"

    catalog = tmp_path / "catalog"
    shutil.copytree(ROOT / "src" / "budgeteer" / "catalog" / "data", catalog)
    vms = catalog / "vms.csv"
    lines = vms.read_bytes().count(b"\n")
    with vms.open("ab") as fh:
        fh.write(b"aws,us-east-1,\xff\n")
    with pytest.raises(
        CatalogError, match=rf"vms\.csv: not UTF-8 text: byte 0xff on line {lines + 1}"
    ):
        load_catalog(catalog)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("status", "--config", "{bad}"), "{bad}: (file): not UTF-8 text: byte 0xff on line 2"),
        (("plan", "--jobs", "{bad}"), "{bad}: (file): not UTF-8 text: byte 0xff on line 2"),
    ],
)
def test_the_cli_answers_bytes_that_are_not_text_with_a_message(
    tmp_path: Path, args: tuple[str, ...], problem: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"interval_seconds: 30\nstore: \xff\n")
    out = budgeteer(*(a.format(bad=bad) for a in args), cwd=tmp_path)
    assert out.returncode == 2
    assert problem.format(bad=bad) in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == [bad]  # nothing written


def test_a_bad_catalog_in_the_config_is_a_message(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(ROOT / "src" / "budgeteer" / "catalog" / "data", catalog)
    with (catalog / "vms.csv").open("ab") as fh:
        fh.write(b"\xc3\x28\n")  # a broken two-byte sequence
    config = tmp_path / "c.yaml"
    config.write_text(f"catalog: {catalog}\nstore: sqlite:///{tmp_path / 's.db'}\n")
    for args in (
        ("plan", "--jobs", str(EXAMPLES / "jobs.yaml"), "--catalog", str(catalog)),
        ("run", "--config", str(config), "--until-idle"),
    ):
        out = budgeteer(*args)
        assert out.returncode == 2, args
        assert "vms.csv: not UTF-8 text: byte 0xc3 on line" in out.stderr
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "s.db").exists()  # the service did not start


def test_a_config_that_is_no_regular_file_resolves_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config, root = load_config(Path(os.devnull))
    assert (config.store, root) == ("sqlite:///budgeteer.db", tmp_path)
    regular = tmp_path / "deploy" / "c.yaml"
    regular.parent.mkdir()
    regular.write_text("interval_seconds: 30\n")
    assert load_config(regular)[1] == regular.parent
    # a pipe, as ``--config <(envsubst < c.yaml)`` gives one: the store lands here, not in /dev/fd
    out = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m budgeteer status --config <(echo 'interval_seconds: 30')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "budgeteer.db").is_file()


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000, "not valid YAML: nested too deeply"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "not valid json: nested too deeply"),
        (
            "d.yaml",
            "a: " + "[" * 65 + "]" * 65,
            "nested deeper than 64 levels (or a YAML alias in itself)",
        ),
        (
            "cycle.yaml",
            "a: &a [1, *a]\n",
            "nested deeper than 64 levels (or a YAML alias in itself)",
        ),
    ],
)
def test_documents_nested_too_deeply_are_refused(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        read_document(path)
    assert (err.value.field, err.value.problem) == ("(file)", problem)


def test_aliases_shared_many_times_are_walked_once(tmp_path: Path) -> None:
    """A "billion laughs" document is 10⁸ strings to a naive walk: the depth check visits each
    shared node once (per depth), so it answers at once, and the document is what YAML says."""
    lines = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    doc = read_document(path)
    assert doc["l8"][9][9][9][9][9][9][9][9][9] == "x"
    path.write_text("\n".join(lines[:-1]) + "\nl8: &l8 [" + "[" * 60 + "*l7" + "]" * 60 + "]\n")
    with pytest.raises(SpecError, match="nested deeper than 64 levels"):
        read_document(path)  # the shared node reached deeper the second time


def test_catalog_and_trace_syntax_errors_are_messages(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(ROOT / "src" / "budgeteer" / "catalog" / "data", catalog)
    vms = catalog / "vms.csv"
    lines = vms.read_bytes().count(b"\n")
    with vms.open("a") as fh:
        fh.write("aws,us-east-1," + "x" * 200_000 + "\n")
    with pytest.raises(CatalogError) as err:
        load_catalog(catalog)
    assert (err.value.row, err.value.problem) == (
        lines + 1,
        "not valid CSV: field larger than field limit (131072)",
    )
    trace = tmp_path / "deep.json"
    trace.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TraceError, match=r"\(file\): not valid JSON: nested too deeply"):
        load_trace(trace)
