"""The sections API on this repository's own files and on a generated workspace."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.config import Settings
from offload.errors import Gone, InvalidInput
from offload.sections import Section, Sections, join
from offload.store.store import Store
from sections.sections_workspace import REPO, generated_workspace

# Budgets in the spirit of today's hard cuts: instruction files at 4,000 characters,
# README at 600 tokens, git status at 2,000 characters.
WORKSPACE_BUDGETS = {
    "Workspace": {"max_tokens": 300},
    "Git status": {"max_chars": 2000},
    "Code map": {"max_tokens": 400},
    "Project Instructions": {"max_chars": 4000},
    "Export log": {"max_tokens": 600},
}


def workspace_sections() -> list[Section]:
    return [
        Section(name, text, **WORKSPACE_BUDGETS[name])  # type: ignore[arg-type]
        for name, text in generated_workspace().items()
    ]


def repo_sections() -> list[Section]:
    files = {
        "README": (REPO / "README.md", {"max_tokens": 600}),
        "Contributing": (REPO / "docs" / "contributing.md", {"max_tokens": 150}),
        "Proxy docs": (REPO / "docs" / "proxy.md", {"max_tokens": 600}),
    }
    return [
        Section(name, path.read_text(encoding="utf-8"), source=str(path), **budget)  # type: ignore[arg-type]
        for name, (path, budget) in files.items()
    ]


def test_a_section_that_fits_passes_unchanged_and_stores_nothing(sections: Sections) -> None:
    built = sections.section("README", "# offload\nshort\n", max_tokens=600)
    assert built.text == "# offload\nshort\n"
    assert built.method == "unchanged" and built.reference is None
    assert sections.store.stats()["entries"] == 0


def test_repo_files_over_budget_are_compressed_within_budget_and_stored_whole(
    sections: Sections,
) -> None:
    items = repo_sections()
    assert any(s.name == "Contributing" for s in items)
    for section, built in zip(items, sections.build(items), strict=True):
        assert built.tokens <= (section.max_tokens or 10**9)
        if built.original_tokens <= (section.max_tokens or 0):
            assert built.text == section.text
            continue
        digest = hashlib.sha256(section.text.encode()).hexdigest()
        assert built.reference == f"ctx:sha256:{digest}"
        first = built.text.splitlines()[0]
        assert first == (
            f'Section "{section.name}" compressed ({built.original_tokens:,} → '
            f"{sections.counter.count(built.text.split(chr(10), 2)[2])} tokens). "
            f'Original available via RetrieveContext(reference="{built.reference}").'
        )
        entry = sections.store.resolve(built.reference)
        assert sections.store.body(entry, original=True) == section.text


def test_the_generated_workspace_fits_every_budget_and_keeps_what_matters(
    sections: Sections,
) -> None:
    items = workspace_sections()
    built = {b.name: b for b in sections.build(items)}
    for s in items:
        b = built[s.name]
        assert b.compressed, s.name
        assert s.max_chars is None or len(b.text) <= s.max_chars
        assert s.max_tokens is None or sections.counter.count(b.text) <= s.max_tokens
    assert "MemoryError: export_rows exceeded 2 GiB" in built["Export log"].text
    assert "never commit secrets" in built["Project Instructions"].text
    assert "## Testing" in built["Project Instructions"].text
    assert "On branch feature/billing-export" in built["Git status"].text


@pytest.mark.slow
def test_the_same_input_gives_the_same_bytes_in_another_process(
    sections: Sections, settings: Settings, tmp_path: Path
) -> None:
    ours = [b.text for b in sections.build(workspace_sections())]
    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from offload.config import load_settings\n"
        "from offload.sections import Sections\n"
        "from sections.test_builder import workspace_sections\n"
        "with Sections(load_settings(flags={'store.home': sys.argv[1]})) as s:\n"
        "    print(json.dumps([b.text for b in s.build(workspace_sections())]))\n"
    )
    other_home = tmp_path / "other-home"
    out = subprocess.run(
        [sys.executable, "-c", script, str(other_home), str(Path(__file__).parents[1])],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == ours


@pytest.mark.slow
def test_references_resolve_after_a_restart_in_another_process(
    sections: Sections, settings: Settings
) -> None:
    built = sections.build(workspace_sections())
    refs = {b.name: b.reference for b in built}
    sections.close()
    script = (
        "import json, sys\n"
        "from offload.config import load_settings\n"
        "from offload.sections import Sections\n"
        "with Sections(load_settings(flags={'store.home': sys.argv[1]})) as s:\n"
        "    r = s.retriever()\n"
        "    out = {}\n"
        "    for ref in json.loads(sys.argv[2]):\n"
        "        res = r(ref)\n"
        "        out[ref] = [res.is_error, res.text]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(settings.home), json.dumps(list(refs.values()))],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    answers = json.loads(proc.stdout)
    originals = generated_workspace()
    for name, ref in refs.items():
        is_error, text = answers[ref]
        assert not is_error
        assert originals[name] in text
        assert f'ref="{ref}"' in text


def test_an_expired_original_says_it_expired_and_how_to_regenerate(settings: Settings) -> None:
    now = [1_800_000_000.0]
    store = Store.open(settings, clock=lambda: now[0])
    with Sections(settings, store=store, clock=lambda: now[0]) as s:
        built = s.section("Project Instructions", "x " * 3000, max_tokens=200)
        assert built.expires == pytest.approx(now[0] + 7 * 86400)
        assert built.reference is not None
        now[0] += 7 * 86400 + 1
        with pytest.raises(Gone) as info:
            store.resolve(built.reference)
        assert info.value.reason == "expired"
        assert 're-run the section builder for "Project Instructions"' in str(info.value)
        answer = s.retriever()(built.reference)
        assert answer.is_error
        assert "expired" in answer.text and "re-run the section builder" in answer.text
        # Building the section again makes the same reference live again.
        again = s.section("Project Instructions", "x " * 3000, max_tokens=200)
        assert again.reference == built.reference
        assert not s.retriever()(built.reference).is_error
    store.close()


def test_an_original_past_its_expiry_but_not_yet_archived_is_stored_afresh(
    settings: Settings,
) -> None:
    now = [1_800_000_000.0]
    store = Store.open(settings, clock=lambda: now[0])
    with Sections(settings, store=store, clock=lambda: now[0]) as s:
        first = s.section("Log", "line\n" * 2000, max_tokens=100)
        now[0] += 8 * 86400
        second = s.section("Log", "line\n" * 2000, max_tokens=100)
        assert second.reference == first.reference
        assert second.expires == pytest.approx(now[0] + 7 * 86400)
        assert not s.retriever()(first.reference or "").is_error
    store.close()


def test_the_ttl_and_tool_name_come_from_settings(settings: Settings) -> None:
    custom = settings.with_overrides({"sections.ttl_days": 1, "sections.retrieve_tool": "Fetch"})
    with Sections(custom, clock=lambda: 1000.0) as s:
        built = s.section("A", "word " * 500, max_tokens=100)
        assert built.expires == 1000.0 + 86400
        assert 'via Fetch(reference="ctx:sha256:' in built.text


def test_a_budget_too_small_for_the_advertise_line_is_refused(sections: Sections) -> None:
    with pytest.raises(InvalidInput, match="cannot hold even the line"):
        sections.section("A", "word " * 500, max_tokens=20)
    assert sections.store.stats()["entries"] == 0


def test_repeated_section_names_are_refused(sections: Sections) -> None:
    with pytest.raises(InvalidInput, match="repeated: A"):
        sections.build([Section("A", "x"), Section("A", "y")])


def test_join_puts_each_section_under_its_heading(sections: Sections) -> None:
    built = sections.build([Section("A", "one"), Section("B", "two")])
    assert join(built) == "## A\n\none\n\n## B\n\ntwo\n"


def test_an_unreachable_local_model_falls_back_to_the_extractive_form(
    settings: Settings,
) -> None:
    from realparts import free_port

    dead = settings.with_overrides(
        {
            "local_model.base_url": f"http://127.0.0.1:{free_port()}",
            "local_model.retries": 0,
            "local_model.timeout": 5,
        }
    )
    with Sections(dead) as s:
        built = s.section("Log", generated_workspace()["Export log"], max_tokens=300)
    with Sections(settings) as plain:
        expected = plain.section("Log", generated_workspace()["Export log"], max_tokens=300)
    assert built.method == "extractive"
    assert "local model failed" in built.note
    assert built.text == expected.text


def test_a_model_output_that_leaves_a_code_fence_open_is_not_used(settings: Settings) -> None:
    from scripted_model import scripted_model

    text = generated_workspace()["Export log"]
    with scripted_model() as (answers, url):
        answers.content = "900 batches processed:\n```text\nMemoryError in run_export"
        modeled = settings.with_overrides({"local_model.base_url": url, "local_model.retries": 0})
        with Sections(modeled) as s:
            built = s.section("Log", text, max_tokens=300)
    assert answers.asked  # the model was asked, and its answer refused
    assert built.method == "extractive"
    assert "code fence open" in built.note
    assert "```text" not in built.text


def test_model_sections_are_built_from_the_cached_model_output(settings: Settings) -> None:
    """A remembered model output is reused byte for byte (no model call needed)."""
    from offload.core.hashing import text_hash
    from offload.sections.builder import _MODEL_STATE, _budget_key

    modeled = settings.with_overrides({"local_model.base_url": "http://127.0.0.1:9"})
    text = generated_workspace()["Export log"]
    section = Section("Log", text, max_tokens=300)
    budget = section.budget()
    assert budget is not None
    with Sections(modeled) as s:
        body_budget = s._body_budget(section, budget)
        key = f"{text_hash(text)}:{modeled.local_model.model}:{_budget_key(body_budget)}"
        s.store.put_state(
            _MODEL_STATE, key, {"text": "900 batches processed; MemoryError in run_export"}
        )
        built = s.section("Log", text, max_tokens=300)
    assert built.method == "model"
    assert built.text.endswith("\n\n900 batches processed; MemoryError in run_export")


@pytest.mark.slow
def test_a_real_local_model_compresses_an_over_budget_section(
    settings: Settings, llama_server: object
) -> None:
    base_url = llama_server.base_url  # type: ignore[attr-defined]
    modeled = settings.with_overrides({"local_model.base_url": base_url})
    text = generated_workspace()["Project Instructions"]
    with Sections(modeled) as s:
        first = s.section("Project Instructions", text, max_tokens=300)
        second = s.section("Project Instructions", text, max_tokens=300)
        third = s.section("Project Instructions", text, max_tokens=300)
    assert first.tokens <= 300 and second.tokens <= 300
    # every build renews the stored original's expiry; everything else must not move
    same = [dataclasses.replace(b, expires=None) for b in (first, second, third)]
    if not first.note.startswith("local model failed"):  # a transient failure is retried
        assert same[1] == same[0], first.note
    assert same[2] == same[1]  # remembered: the prompt cache keeps hitting, no new model call
    assert first.expires is not None and third.expires is not None
    assert third.expires >= first.expires


def test_a_remembered_model_fallback_is_reused_without_calling_the_model(
    settings: Settings,
) -> None:
    from offload.core.hashing import text_hash
    from offload.sections.builder import _MODEL_STATE, _budget_key

    modeled = settings.with_overrides({"local_model.base_url": "http://127.0.0.1:9"})
    text = generated_workspace()["Export log"]
    section = Section("Log", text, max_tokens=300)
    budget = section.budget()
    assert budget is not None
    with Sections(modeled) as s:
        key = f"{text_hash(text)}:{modeled.local_model.model}:"
        key += _budget_key(s._body_budget(section, budget))
        s.store.put_state(_MODEL_STATE, key, {"fallback": "local model: not shorter"})
        built = s.section("Log", text, max_tokens=300)
    with Sections(settings) as plain:
        expected = plain.section("Log", text, max_tokens=300)
    assert built.method == "extractive" and built.note == "local model: not shorter"
    assert built.text == expected.text
