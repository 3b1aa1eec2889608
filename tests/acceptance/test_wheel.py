"""The wheel as a user gets it: installed into a fresh virtual environment beside a
project that has its own ``storage``, ``runtime`` and ``actors`` packages.

leaseward's layers live under the one import name ``leaseward``, so neither side
can shadow the other: the project's agent runs embedded and through
``leaseward daemon --app``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.acceptance_support import ROOT, sqlite_url, wait_until

pytestmark = pytest.mark.slow

INSTALL_TIMEOUT_SECONDS = 300.0
RUN_TIMEOUT_SECONDS = 60.0

# A user's project whose top-level packages carry leaseward's folder names.
PROJECT_FILES = {
    "storage/__init__.py": """
        UPLOADS = []

        def upload(name: str) -> str:
            UPLOADS.append(name)
            return f"stored:{name}"
    """,
    "runtime/__init__.py": """
        MODE = "user-runtime"
    """,
    "actors/__init__.py": """
        CAST = ["user-actor"]
    """,
    "myagents.py": """
        from actors import CAST
        from runtime import MODE
        from storage import upload

        from leaseward import (
            Agent,
            App,
            ProviderReply,
            ScriptedProvider,
            ToolCall,
            ToolContext,
            ToolEffect,
            tool,
        )


        @tool(effect=ToolEffect.IDEMPOTENT_WRITE)
        async def store_file(ctx: ToolContext, name: str) -> str:
            return f"{upload(name)}:{MODE}:{CAST[0]}"


        provider = ScriptedProvider(
            [
                ProviderReply(tool_calls=[ToolCall("store_file", {"name": "a.txt"}, "c1")]),
                ProviderReply(text="done"),
            ]
        )
        app = App(agents=[Agent("archivist", provider, tools=[store_file])])
    """,
    "embedded.py": """
        import sys

        import anyio

        from leaseward import Runtime
        from myagents import app


        async def main() -> None:
            async with Runtime.open(sys.argv[1], app) as rt:
                run_id = await rt.submit("archivist", None)
                info = await rt.wait(run_id, timeout=30)
                steps = await rt.steps(run_id)
            print(info.state.value, [step.output for step in steps if step.tool])


        anyio.run(main)
    """,
}


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEWARD_", "PYTHON"))}
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        cwd=out,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    (found,) = out.glob("leaseward-*.whl")
    return found


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    home = tmp_path_factory.mktemp("venv")
    # The venv gets no pip of its own (bootstrapping one was most of this fixture's
    # time): this pip installs the wheel and what it requires into it, as its own would.
    venv.create(home, with_pip=False)
    _run(
        [sys.executable, "-m", "pip", "--python", str(home / "bin/python"), "install",
         "--quiet", str(wheel)],
        cwd=home,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )  # fmt: skip
    return home


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "project"
    for name, text in PROJECT_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    yield root


def test_the_wheel_holds_only_the_leaseward_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"leaseward"}
    for expected in (
        "leaseward/__init__.py",
        "leaseward/py.typed",
        "leaseward/app.py",
        "leaseward/client.py",
        "leaseward/daemon.py",
        "leaseward/cli/commands.py",
        "leaseward/console/app.py",
        "leaseward/console/templates/runs.html",
        "leaseward/console/static/refresh.js",
        "leaseward/providers/__init__.py",
        "leaseward/providers/openai.py",
        "leaseward/providers/anthropic.py",
        "leaseward/providers/endpoint.py",
        "leaseward/runtime/machine/run_machine.py",
        "leaseward/actors/run_actor.py",
        "leaseward/storage/store.py",
        "leaseward/storage/sql/queries/sqlite.sql",
        "leaseward/storage/sql/queries/postgresql.sql",
        "leaseward/storage/sql/migrations/0001_initial.sqlite.sql",
    ):
        assert expected in names


def test_a_project_with_its_own_storage_package_runs_embedded(
    user_venv: Path, project: Path
) -> None:
    url = sqlite_url(project / "runs.db")
    done = _run(
        [str(user_venv / "bin/python"), "embedded.py", url],
        cwd=project,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert done.stdout.strip() == "completed ['stored:a.txt:user-runtime:user-actor']"


def test_a_project_with_its_own_storage_package_runs_under_the_daemon(
    user_venv: Path, project: Path
) -> None:
    leaseward = str(user_venv / "bin/leaseward")
    url = sqlite_url(project / "runs.db")
    assert _run([leaseward, "--version"], project, RUN_TIMEOUT_SECONDS).stdout.startswith(
        "leaseward "
    )
    _run([leaseward, "migrate", "--store", url], project, RUN_TIMEOUT_SECONDS)
    run_id = _run(
        [leaseward, "submit", "archivist", "--store", url], project, RUN_TIMEOUT_SECONDS
    ).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEWARD_", "PYTHON"))}
    daemon = subprocess.Popen(
        [
            leaseward,
            "daemon",
            "--app",
            "myagents:app",
            "--store",
            url,
            "--poll-interval-seconds",
            "0.05",
        ],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def finished() -> str | None:
            if daemon.poll() is not None:
                pytest.fail(f"the daemon exited: {daemon.stderr.read() if daemon.stderr else ''}")
            shown = _run(
                [leaseward, "show", run_id, "--json", "--store", url],
                project,
                RUN_TIMEOUT_SECONDS,
            ).stdout
            return shown if '"completed"' in shown else None

        shown = wait_until("the daemon to complete the run", finished, RUN_TIMEOUT_SECONDS)
        assert "stored:a.txt:user-runtime:user-actor" in shown
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert daemon.returncode == 0


def test_the_wheel_brings_the_providers_and_their_http_client(
    user_venv: Path, tmp_path: Path
) -> None:
    done = _run(
        [
            str(user_venv / "bin/python"),
            "-c",
            "from leaseward.providers import OpenAIChat; import httpx; "
            "print(OpenAIChat('m', base_url='http://127.0.0.1:9/v1'))",
        ],
        cwd=tmp_path,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert (
        done.stdout.strip() == "OpenAIChat(model='m', url='http://127.0.0.1:9/v1/chat/completions')"
    )
