"""A real model agent: it keeps notes in a folder, with one read tool and one write tool.

It talks to any OpenAI-compatible chat-completions endpoint, named by the environment:

    OPENAI_BASE_URL   the endpoint (default OpenAI's; Ollama: http://localhost:11434/v1)
    OPENAI_API_KEY    its key (a local server may need none)
    OPENAI_MODEL      the model (default gpt-4o-mini)
    NOTES_DIR         where the notes are kept (default ./notes)
    LEASEWARD_STORE   the store (default sqlite:///leaseward.db)

Embedded, one interactive run (never retried: a failure shows at once) and its journal:

    OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=llama3.2 \\
        .venv/bin/python examples/openai_agent.py "Note that the boiler is serviced on May 3"

Under the daemon, from the repository's root, where a rate limit or an unreachable
endpoint sends the run back to the queue to be tried again:

    .venv/bin/leaseward submit notes --input '"What do my notes say about the boiler?"'
    .venv/bin/leaseward daemon --app examples.openai_agent:build_app
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import anyio

from leaseward import (
    Agent,
    App,
    LeasewardError,
    RunState,
    Runtime,
    ToolContext,
    ToolEffect,
    ToolError,
    tool,
)
from leaseward.providers import OpenAIChat

NOTE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_NOTE_CHARS = 10_000
INSTRUCTIONS = (
    "You keep the user's notes. Read a note before you answer from it; write a note "
    "when the user asks you to remember something. Note names are short words, such "
    "as 'boiler' or 'shopping'. Answer in one or two sentences."
)


def notes_dir() -> Path:
    return Path(os.environ.get("NOTES_DIR", "notes"))


def note_path(name: str) -> Path:
    if not NOTE_NAME.fullmatch(name):
        raise ToolError(f"{name!r} is not a note name: use letters, digits, '-' and '_'")
    return notes_dir() / f"{name}.txt"


@tool
async def read_note(ctx: ToolContext, name: str) -> str:
    """Read the note called `name`. Lists the notes there are when it does not exist."""
    path = note_path(name)
    if not path.exists():
        known = sorted(p.stem for p in notes_dir().glob("*.txt"))
        raise ToolError(f"there is no note {name!r}; the notes are: {', '.join(known) or 'none'}")
    return path.read_text(encoding="utf-8")


@tool(effect=ToolEffect.IDEMPOTENT_WRITE)
async def write_note(ctx: ToolContext, name: str, text: str) -> str:
    """Write `text` as the note called `name`, replacing what it held."""
    if len(text) > MAX_NOTE_CHARS:
        raise ToolError(f"a note holds at most {MAX_NOTE_CHARS} characters")
    path = note_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Writing the same text twice leaves the same note: a retried call changes nothing.
    path.write_text(text, encoding="utf-8")
    return f"saved {name} ({len(text)} characters)"


def build_app() -> App:
    provider = OpenAIChat(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), temperature=0.2)
    agent = Agent(
        "notes",
        provider,
        tools=[read_note, write_note],
        instructions=INSTRUCTIONS,
        max_steps=8,
    )
    return App([agent])


async def main(question: str) -> int:
    store = os.environ.get("LEASEWARD_STORE", "sqlite:///leaseward.db")
    async with Runtime.open(store, build_app()) as rt:
        run = await rt.run("notes", question)
        steps = await rt.steps(run.id)
    print(f"run {run.id}: {run.state.value}")
    for step in steps:
        if step.tool is not None:
            print(f"  {step.tool}({step.arguments}) -> {step.status.value}: {step.output}")
        elif isinstance(step.output, dict) and "usage" in step.output:
            usage = step.output["usage"]
            print(
                f"  model {step.output.get('model')}: {usage['input_tokens']} tokens in, "
                f"{usage['output_tokens']} out, {step.output.get('latency_ms')} ms"
            )
    print(run.result if run.result is not None else f"error: {run.error}")
    return 0 if run.state is RunState.COMPLETED else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} QUESTION")
    # leaseward's warnings (a connection retried, a record deferred) on stderr.
    logging.basicConfig(format="%(name)s %(message)s")
    try:
        sys.exit(anyio.run(main, sys.argv[1]))
    except LeasewardError as exc:
        # A setting missing (the API key, say) or a store that cannot open: one line.
        sys.exit(f"{sys.argv[0]}: {exc.message}")
