"""examples/openai_agent.py as a user runs it, embedded and under ``leaseward daemon``,
against an OpenAI-compatible endpoint named by environment variables: here the
loopback model server, so nothing leaves the machine. ``leaseward show`` then
prints the tokens of each provider turn and their total."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.acceptance.acceptance_support import LEASEWARD, ROOT, base_env, ok, sqlite_url
from tests.model_server import ModelServer, Reply, model_server, openai_completion

pytestmark = pytest.mark.anyio

KEY = "sk-example-0c4b7e19d2"
RUN_TIMEOUT_SECONDS = 60.0


def script_a_conversation(server: ModelServer) -> None:
    """The model writes a note, reads it back, and answers."""
    server.script(
        Reply(
            body=openai_completion(
                None,
                [("c1", "write_note", {"name": "boiler", "text": "Serviced on May 3."})],
                usage=(210, 30),
            )
        ),
        Reply(
            body=openai_completion(None, [("c2", "read_note", {"name": "boiler"})], usage=(260, 12))
        ),
        Reply(body=openai_completion("The boiler was serviced on May 3.", usage=(300, 11))),
    )


def example_env(server: ModelServer, tmp_path: Path, url: str) -> dict[str, str]:
    return base_env(
        OPENAI_BASE_URL=f"{server.base_url}/v1",
        OPENAI_API_KEY=KEY,
        OPENAI_MODEL="loopback-model",
        NOTES_DIR=str(tmp_path / "notes"),
        LEASEWARD_STORE=url,
    )


def check_the_conversation(server: ModelServer, tmp_path: Path) -> None:
    assert (tmp_path / "notes" / "boiler.txt").read_text() == "Serviced on May 3."
    first = server.requests[0]
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.json["model"] == "loopback-model"
    assert [t["function"]["name"] for t in first.json["tools"]] == ["read_note", "write_note"]
    assert server.requests[2].json["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": "Serviced on May 3.",
    }


def check_show(url: str, run_id: str) -> None:
    text = ok("show", run_id, "--store", url).stdout
    assert "tokens: 210 in, 30 out (loopback-model-0613)" in text
    assert "tokens: 300 in, 11 out (loopback-model-0613)" in text
    assert "tokens: 770 in, 53 out in total, over 3 provider turns" in text
    shown: dict[str, Any] = ok("show", run_id, "--json", "--store", url).json()
    assert shown["usage"] == {"input_tokens": 770, "output_tokens": 53, "provider_turns": 3}
    assert KEY not in text and KEY not in json.dumps(shown)


async def test_the_example_runs_embedded(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "runs.db")
    async with model_server() as server:
        script_a_conversation(server)
        done = await anyio.run_process(
            [sys.executable, str(ROOT / "examples" / "openai_agent.py"), "When was the boiler?"],
            env=example_env(server, tmp_path, url),
            cwd=tmp_path,
            check=False,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"{stdout}\n{stderr}"
    assert stdout.splitlines()[-1] == "The boiler was serviced on May 3."
    assert "model loopback-model-0613: 210 tokens in, 30 out" in stdout
    check_the_conversation(server, tmp_path)
    run_id = stdout.split()[1].rstrip(":")
    check_show(url, run_id)


async def test_the_example_runs_under_the_daemon(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "runs.db")
    ok("migrate", "--store", url)
    run_id = ok("submit", "notes", "--input", '"When was the boiler?"', "--store", url).stdout
    run_id = run_id.strip()
    async with model_server() as server:
        script_a_conversation(server)
        env = example_env(server, tmp_path, url)
        log = (tmp_path / "daemon.log").open("wb")
        daemon = await anyio.open_process(
            [
                str(LEASEWARD),
                "daemon",
                "--app",
                "examples.openai_agent:build_app",
                "--poll-interval-seconds",
                "0.05",
            ],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            with anyio.fail_after(RUN_TIMEOUT_SECONDS):
                while True:
                    shown = await anyio.run_process(
                        [str(LEASEWARD), "show", run_id, "--json"], env=env
                    )
                    if json.loads(shown.stdout)["state"] == "completed":
                        break
                    await anyio.sleep(0.1)
        finally:
            daemon.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                await daemon.wait()
            await daemon.aclose()
            log.close()
    assert daemon.returncode == 0, (tmp_path / "daemon.log").read_text()
    check_the_conversation(server, tmp_path)
    check_show(url, run_id)


async def test_the_example_without_an_api_key_says_so_in_one_line(tmp_path: Path) -> None:
    env = base_env(NOTES_DIR=str(tmp_path / "notes"), LEASEWARD_STORE=sqlite_url(tmp_path / "r.db"))
    env.pop("OPENAI_API_KEY", None)
    done = await anyio.run_process(
        [sys.executable, str(ROOT / "examples" / "openai_agent.py"), "When was the boiler?"],
        env=env,
        cwd=tmp_path,
        check=False,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1 and "API key" in stderr
