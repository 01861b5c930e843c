"""Progress on a terminal: the CLI run under a real pseudo-terminal (python's pty: stdout and
stderr are a tty, as in a shell) draws a tqdm bar for svi, for nuts (its chains in worker
processes) and for a report. The pty is opened without a size, as ``script`` or a CI runner
opens one: it reports 0 columns, which once trimmed every bar to nothing."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")


def under_a_terminal(*argv: str, cwd: Path) -> tuple[int, str]:
    """``python -m zoo ARGV`` with stdin, stdout and stderr a fresh pseudo-terminal; its exit
    status and everything it wrote there."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_NCOLS", "TQDM_NROWS")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo", *argv],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=600), b"".join(chunks).decode("utf-8", "replace")


def bar(desc: str, total: int, text: str) -> bool:
    """Whether ``text`` holds a tqdm bar of ``desc`` counting to ``total``."""
    return re.search(rf"{re.escape(desc)}:\s+\d+%\|.*?\| \d+/{total} \[", text) is not None


def test_svi_nuts_and_a_report_draw_a_bar_on_a_terminal(tmp_path: Path) -> None:
    rc, text = under_a_terminal(
        "run", "beta_bernoulli", "-e", "svi", "-o", "num_steps=400", cwd=tmp_path
    )
    assert rc == 0 and bar("beta_bernoulli svi[model,trace]", 400, text), text
    nuts = ("-o", "num_samples=60", "-o", "warmup=60", "-o", "num_chains=2")
    rc, text = under_a_terminal("run", "beta_bernoulli", "-e", "nuts", *nuts, cwd=tmp_path)
    assert rc == 0 and bar("nuts", 120, text), text
    report = ("--engines", "exact,laplace", "--profile", "smoke", "--workers", "1")
    rc, text = under_a_terminal("report", "beta_bernoulli", *report, "--out", "r", cwd=tmp_path)
    assert rc == 0 and bar("zoo report", 2, text), text
    # -q: no bar
    rc, text = under_a_terminal("run", "beta_bernoulli", "-e", "svi", "-q", cwd=tmp_path)
    assert rc == 0 and "svi[model,trace]" not in text
