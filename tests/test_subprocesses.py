"""The child-command runner that `--seeds` and the demo share: exit code, log, and the line that says why."""

from nas.common.subprocesses import last_error, run_module


def test_a_child_module_runs_with_its_output_in_the_log_and_its_error_line_found(tmp_path, monkeypatch):
    (tmp_path / "child_says_error.py").write_text(
        "import sys\nprint('working')\nprint('error: first problem', file=sys.stderr)\n"
        "print('error: data.txt: line 3: no tag', file=sys.stderr)\nprint('  (cleaning up)')\nsys.exit(2)\n"
    )
    (tmp_path / "child_raises.py").write_text("print('working')\nraise ValueError('boom')\n")
    (tmp_path / "child_ok.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the runner adds the toolkit in front of it

    assert run_module("child_ok", ["--a", "b c"], tmp_path / "ok.log") == 0
    assert (tmp_path / "ok.log").read_text() == '["--a", "b c"]\n'
    assert run_module("child_says_error", [], tmp_path / "error.log") == 2
    assert "working" in (tmp_path / "error.log").read_text()
    assert last_error(tmp_path / "error.log") == "error: data.txt: line 3: no tag"
    assert run_module("child_raises", [], tmp_path / "raises.log") == 1
    assert last_error(tmp_path / "raises.log") == "ValueError: boom"
    (tmp_path / "empty.log").write_text("")
    assert last_error(tmp_path / "empty.log") == "(no output)"


def test_a_child_module_streams_each_line_to_the_caller_as_the_log_keeps_it_all(tmp_path, monkeypatch):
    (tmp_path / "child_progress.py").write_text(
        "import sys\nprint('loading')\nfor i in (1, 2, 3):\n    sys.stderr.write(f'\\rstep {i}/3')\n"
        "print('\\nerror: out of data', file=sys.stderr)\nsys.exit(2)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    seen = []
    assert run_module("child_progress", [], tmp_path / "progress.log", on_line=seen.append) == 2
    assert seen == ["loading", "step 1/3", "step 2/3", "step 3/3", "error: out of data"]
    assert (tmp_path / "progress.log").read_bytes() == b"loading\n\rstep 1/3\rstep 2/3\rstep 3/3\nerror: out of data\n"
