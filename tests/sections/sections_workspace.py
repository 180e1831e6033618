"""A generated workspace: the sections an agent CLI would build for a mid-sized project."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def generated_workspace() -> dict[str, str]:
    """The sections an agent CLI would build for a mid-sized project (deterministic).

    A workspace tree, ``git status`` with many changes, a code map, an instruction file,
    and a long file dump with a traceback in a log.
    """
    modules = [
        f"src/app/{pkg}/{mod}.py"
        for pkg in ("api", "db", "jobs", "auth")
        for mod in ("models", "views", "tasks", "utils", "handlers", "schemas", "client", "cache")
    ]
    tree = "\n".join(
        [
            "workspace: /home/dev/app (412 files)",
            *modules,
            *[f"tests/test_{m.split('/')[-2]}_{m.split('/')[-1]}" for m in modules],
        ]
    )
    status = (
        "On branch feature/billing-export\nChanges not staged for commit:\n"
        + "\n".join(f"\tmodified:   {m}" for m in modules * 3)
        + "\n\nUntracked files:\n"
        + "\n".join(f"\tnotes/todo-{i}.md" for i in range(40))
    )
    code_map = "\n".join(
        f"{m}: class {m.split('/')[-1].title().replace('.Py', '')}Handler; def handle_{i}(request); "
        f"def validate_{i}(payload) -> bool"
        for i, m in enumerate(modules)
    )
    rules = [
        "# AGENTS.md",
        "",
        "## Setup",
        "Run `make dev` once; it creates the virtualenv and installs pre-commit hooks.",
        "",
        "## Rules",
    ]
    for i in range(60):
        rules.append(f"- Rule {i}: keep module {modules[i % len(modules)]} under 400 lines.")
    rules += ["- You must never commit secrets; use `vault read` instead.", "", "## Testing"]
    rules += [f"Test note {i}: run `pytest -k case{i}` before pushing." for i in range(40)]
    dump = "\n".join(
        [f"{i:05d} INFO worker-{i % 7} processed batch {i} in {i % 97} ms" for i in range(900)]
        + [
            "Traceback (most recent call last):",
            '  File "src/app/jobs/tasks.py", line 88, in run_export',
            "    rows = fetch_all(cursor)",
            "MemoryError: export_rows exceeded 2 GiB",
        ]
    )
    return {
        "Workspace": tree,
        "Git status": status,
        "Code map": code_map,
        "Project Instructions": "\n".join(rules),
        "Export log": dump,
    }
