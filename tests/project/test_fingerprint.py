"""A job's code reaches Snakemake as one fingerprint file: the sha256 of each module the job runs, rewritten
only when one changes, with the newest module's mtime (so the mtime trigger reruns what it did with the
modules themselves as inputs)."""

from __future__ import annotations

import os

from vocabtransfer.pipeline import fingerprint
from vocabtransfer.app.params import load_params
from vocabtransfer.pipeline.stage_spec import PACKAGE
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.plan.params_root import Params

from conftest import REPO


def test_an_init_jobs_fingerprint_holds_its_own_methods_modules(tmp_path):
    params = Params(load_params(REPO / "params.yaml"))
    focus = STAGES["init"].code_modules(params, {"lang": "sw", "method": "focus", "pseed": "1"})
    wechsel = STAGES["init"].code_modules(params, {"lang": "sw", "method": "wechsel", "pseed": "1"})
    path = fingerprint.write("init", focus, str(tmp_path))
    assert path != fingerprint.write("init", wechsel, str(tmp_path))  # another method, another file
    text = open(path).read()
    assert "  src/vocabtransfer/init/methods/focus.py\n" in text and "init/methods/wechsel.py" not in text
    assert len(text.splitlines()) == len(focus) and all(len(line.split()[0]) == 64 for line in text.splitlines())
    assert os.stat(path).st_mtime_ns == max((PACKAGE / m).stat().st_mtime_ns for m in focus)


def test_the_fingerprint_changes_exactly_when_a_module_does(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    for name in ("a.py", "b.py"):
        (package / name).write_text(f"# {name}\n")
    os.utime(package / "a.py", ns=(10**18, 10**18))  # 2001: b.py is the newer
    monkeypatch.setattr(fingerprint, "PACKAGE", package)
    fingerprint.write.cache_clear()
    first = fingerprint.write("corpus", ("a.py", "b.py"), str(tmp_path / "code"))
    assert os.stat(first).st_mtime_ns == (package / "b.py").stat().st_mtime_ns
    assert " src/vocabtransfer/b.py" in open(first).read()
    before = open(first).read()
    (package / "b.py").write_text("# b, edited\n")
    os.utime(package / "b.py", ns=(2 * 10**18, 2 * 10**18))
    fingerprint.write.cache_clear()
    assert fingerprint.write("corpus", ("a.py", "b.py"), str(tmp_path / "code")) == first
    assert open(first).read() != before and os.stat(first).st_mtime_ns == (package / "b.py").stat().st_mtime_ns
    fingerprint.write.cache_clear()
