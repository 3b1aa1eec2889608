"""mypy over the package as the wheel lays it out, and over the tests and benchmarks.

mypy names a module after its folder and cannot follow the package-dir mapping
(or an editable install's import hook), so it is handed every file with the
module name the wheel gives it. Its messages name the files as they are in the
checkout. The options come from ``[tool.mypy]`` in ``pyproject.toml``: strict for
all of it, the peers' untyped libraries aside.

    python -m tests.checks.typecheck
"""

from __future__ import annotations

import os
import sys

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

from tests.checks.source_tree import REPOSITORY, package_modules, script_modules, test_modules


def main() -> int:
    # A target is required by the option parser; the real sources replace it.
    _, options = process_options(
        ["--config-file", str(REPOSITORY / "pyproject.toml"), "-c", "pass"]
    )
    modules = [*package_modules(), *test_modules(), *script_modules("bench")]
    sources = [BuildSource(os.path.relpath(module.path), module.name, None) for module in modules]
    try:
        result = build.build(sources, options)
        messages = result.errors
    except CompileError as failure:
        messages = failure.messages
    for message in messages:
        print(message)
    if messages:
        print(f"mypy: {len(messages)} messages in {len(sources)} modules", file=sys.stderr)
        return 1
    print(f"mypy: no issues in {len(sources)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
