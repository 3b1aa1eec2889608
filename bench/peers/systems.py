"""The systems compare.py measures, the interpreters that run them, and one measurement.

Standard library only, like ``compare.py``. A system is a workload script run
with leaseward's venv or the peers' (``bench/.venv-peers``); each measurement
is its own subprocess, in its own session (so a timeout ends it and whatever it
started), on a fresh SQLite file in a fresh directory or a fresh PostgreSQL
database that the workload makes and drops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "BY_NAME",
    "HERE",
    "MATRIX",
    "REPO",
    "SYSTEMS",
    "Interpreter",
    "Outcome",
    "System",
    "last_line",
    "measure",
    "pg_unreachable",
    "probe",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

MATRIX = "matrix"  # per N, on SQLite
RAW = "raw"  # once per repetition: the raw SQLite limits
LOOP = "loop"  # once per repetition: a submit loop
PG = "pg"  # once per repetition, at the PostgreSQL level of N


@dataclass(frozen=True)
class System:
    name: str
    label: str
    script: str
    peers: bool  # run with the peers' venv, else leaseward's
    module: str  # what must import for the system to run at all
    kind: str
    flags: tuple[str, ...] = ()


SYSTEMS = (
    System("raw", "raw SQLite", "raw_sqlite.py", False, "sqlite3", RAW),
    System(
        "leaseward-read", "leaseward, read", "leaseward_workload.py", False, "leaseward", MATRIX
    ),
    System(
        "leaseward-write",
        "leaseward, write",
        "leaseward_workload.py",
        False,
        "leaseward",
        MATRIX,
        ("--write",),
    ),
    System("dbos", "DBOS", "dbos_workload.py", True, "dbos", MATRIX),
    System(
        "langgraph",
        "LangGraph",
        "langgraph_workload.py",
        True,
        "langgraph.checkpoint.sqlite",
        MATRIX,
    ),
    System(
        "leaseward-no-group-commit",
        "leaseward, read, no group commit",
        "leaseward_workload.py",
        False,
        "leaseward",
        MATRIX,
        ("--no-group-commit",),
    ),
    System(
        "submit-loop",
        "submit loop beside N write runs",
        "submit_loop.py",
        False,
        "leaseward",
        LOOP,
        ("--runs", "100"),
    ),
    System(
        "submit-loop-idle",
        "submit loop, nothing else running",
        "submit_loop.py",
        False,
        "leaseward",
        LOOP,
        ("--runs", "0"),
    ),
    System(
        "leaseward-read-pg", "leaseward, read (PG)", "leaseward_workload.py", False, "leaseward", PG
    ),
    System(
        "leaseward-write-pg",
        "leaseward, write (PG)",
        "leaseward_workload.py",
        False,
        "leaseward",
        PG,
        ("--write",),
    ),
    System("dbos-pg", "DBOS (PG)", "dbos_workload.py", True, "dbos", PG),
    System(
        "procrastinate",
        "procrastinate (PG)",
        "procrastinate_workload.py",
        True,
        "procrastinate",
        PG,
    ),
)
BY_NAME = {system.name: system for system in SYSTEMS}


@dataclass
class Outcome:
    """One measurement: the workload's JSON line, or why there is none."""

    system: str
    concurrency: int  # 0 where the workload does not depend on N
    repetition: int
    wall_seconds: float
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Interpreter:
    path: Path
    python: str | None = None
    sqlite: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    modules: dict[str, str | None] = field(default_factory=dict)  # module: import error or None
    error: str | None = None


PROBE = """
import importlib, importlib.metadata, json, platform, sqlite3, sys
packages = {}
for name in sys.argv[1].split(","):
    try:
        packages[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        packages[name] = None
modules = {}
for name in sys.argv[2].split(","):
    try:
        importlib.import_module(name)
        modules[name] = None
    except Exception as exc:
        modules[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                  "packages": packages, "modules": modules}))
"""


def probe(path: Path, packages: Sequence[str], modules: Sequence[str]) -> Interpreter:
    """What an interpreter has: its Python and SQLite versions, packages, importable modules."""
    found = Interpreter(path)
    if not path.exists():
        found.error = f"{path} does not exist"
        return found
    try:
        completed = subprocess.run(
            [str(path), "-c", PROBE, ",".join(packages), ",".join(modules)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        found.error = f"{path}: {exc}"
        return found
    if completed.returncode != 0:
        found.error = f"{path} exited {completed.returncode}: {last_line(completed.stderr)}"
        return found
    data = json.loads(completed.stdout)
    found.python = data["python"]
    found.sqlite = data["sqlite"]
    found.packages = data["packages"]
    found.modules = data["modules"]
    return found


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def pg_unreachable(url: str, timeout: float = 3.0) -> str | None:
    """Why the server in ``url`` cannot be reached over TCP, or None if it answers."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"PostgreSQL at {host}:{port} is not reachable: {exc}"


def command(
    system: System,
    interpreter: Interpreter,
    directory: Path,
    *,
    concurrency: int,
    steps: int,
    pg_url: str,
    window_seconds: float,
) -> list[str]:
    head = [str(interpreter.path), str(HERE / system.script)]
    if system.kind == RAW or system.kind == LOOP:
        where = ["--db", str(directory / "bench.db"), "--seconds", str(window_seconds)]
        return [*head, *where, *system.flags]
    where = ["--pg-url", pg_url] if system.kind == PG else ["--db", str(directory / "bench.db")]
    return [*head, "--concurrency", str(concurrency), "--steps", str(steps), *where, *system.flags]


def measure(
    system: System,
    interpreter: Interpreter,
    *,
    concurrency: int,
    steps: int,
    repetition: int,
    work_dir: Path,
    timeout: float,
    pg_url: str,
    window_seconds: float,
) -> Outcome:
    """One workload in its own process, on a fresh file in a fresh directory."""
    directory = Path(tempfile.mkdtemp(prefix=f"{system.name}-c{concurrency}-", dir=work_dir))
    argv = command(
        system,
        interpreter,
        directory,
        concurrency=concurrency,
        steps=steps,
        pg_url=pg_url,
        window_seconds=window_seconds,
    )
    outcome = Outcome(system.name, concurrency, repetition, 0.0)
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        outcome.wall_seconds = time.perf_counter() - started
        outcome.error = f"timed out after {timeout:g} s"
        return outcome
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    outcome.wall_seconds = time.perf_counter() - started
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        outcome.error = f"exit {process.returncode}: {last_line(stderr)}"
        return outcome
    outcome.result = json.loads(lines[-1])
    completed = outcome.result.get("completed")
    if completed is not None and completed != concurrency:
        outcome.error = f"only {completed} of {concurrency} runs completed"
    return outcome
