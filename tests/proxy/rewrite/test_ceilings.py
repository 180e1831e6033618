"""Learning a client's own compaction ceiling: its wire is kept under it from then on."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.ceilings import MARGIN, Ceilings, capped, harness_key
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.window import Budget
from offload.store.store import Store
from realparts import run_together

Msgs = list[dict[str, Any]]
N_CTX = 8192


def chat(turns: int, system: str = "You are the Acme harness.") -> Msgs:
    msgs: Msgs = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Plan a trip."},
    ]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": f"step {t} " + "details " * 40})
        msgs.append({"role": "user", "content": f"and then {t}? " + "more " * 40})
    return msgs


def test_a_client_that_halves_its_history_teaches_the_harness_its_ceiling(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(learn_client_ceiling=True), EstimateCounter())
        big = pipe.rewrite(chat(12), N_CTX)
        assert not big.ceiling_learned
        small = pipe.rewrite(chat(3), N_CTX)  # same head, the history cut to a quarter
        assert not small.ceiling_learned  # a side request would look the same
        continued = pipe.rewrite(chat(4), N_CTX)  # the client goes on from the cut history
        assert continued.ceiling_learned == big.wire_tokens
        harness = harness_key(chat(0)[:1])
        assert Ceilings(store).get(harness) == big.wire_tokens
        # from then on (a restarted proxy too) that harness's wire stays under it
        fresh = Pipeline(store, ProxySettings(learn_client_ceiling=True), EstimateCounter())
        for turns in range(3, 16):
            result = fresh.rewrite(chat(turns), N_CTX)
            assert result.wire_tokens <= int(big.wire_tokens * MARGIN)


def test_a_ceiling_learned_by_one_proxy_process_applies_in_another_at_once(
    tmp_path: Path,
) -> None:
    settings = ProxySettings(learn_client_ceiling=True)
    path = tmp_path / "s.db"
    with (
        Store(path, counter=EstimateCounter()) as here,
        Store(path, counter=EstimateCounter()) as there,
    ):
        theirs = Pipeline(there, settings, EstimateCounter())
        before = theirs.rewrite(chat(14), N_CTX)  # the other machine has seen this harness
        ours = Pipeline(here, settings, EstimateCounter())
        big = ours.rewrite(chat(12), N_CTX)
        ours.rewrite(chat(3), N_CTX)
        assert ours.rewrite(chat(4), N_CTX).ceiling_learned == big.wire_tokens
        after = theirs.rewrite(chat(14), N_CTX)
        assert before.wire_tokens > int(big.wire_tokens * MARGIN)
        assert after.wire_tokens <= int(big.wire_tokens * MARGIN)


def test_a_higher_ceiling_never_replaces_a_lower_one_another_process_learned(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    harness = harness_key(chat(0)[:1])
    with (
        Store(path, counter=EstimateCounter()) as here,
        Store(path, counter=EstimateCounter()) as there,
    ):
        ours, theirs = Ceilings(here), Ceilings(there)
        assert ours.learn(harness, 5000) and ours.get(harness) == 5000
        assert theirs.get(harness) == 5000
        assert theirs.learn(harness, 3000)
        assert not ours.learn(harness, 4000)  # 3000 is known on the store, so 4000 is no news
        assert ours.get(harness) == 3000 and theirs.get(harness) == 3000


def test_a_lower_ceiling_learned_while_another_process_learns_a_higher_one_stays(
    shared_store: Path | str,
) -> None:
    harness = harness_key(chat(0)[:1])
    with (
        Store(shared_store, counter=EstimateCounter()) as here,
        Store(shared_store, counter=EstimateCounter()) as there,
    ):
        ours, theirs = Ceilings(here), Ceilings(there)
        assert ours.learn(harness, 5000) and theirs.get(harness) == 5000
        save = there.replace_state
        meanwhile: list[bool] = []

        def ours_saves_first(namespace: str, key: str, value: Any, expected: int) -> int:
            if not meanwhile:  # between their read of 5000 and their save of 4000
                meanwhile.append(ours.learn(harness, 3000))
            return save(namespace, key, value, expected)

        there.replace_state = ours_saves_first  # type: ignore[method-assign]
        assert not theirs.learn(harness, 4000), "3000 was saved first: 4000 is no news"
        assert meanwhile == [True]
        assert ours.get(harness) == theirs.get(harness) == 3000


LEARNERS = 3
LESSONS = 30

# One proxy process's learner: says "ready", waits for "go", then learns LESSONS falling
# ceilings interleaved with the other processes' (process w: START - (j * P + w)).
LEARNER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from offload.core.tokens import EstimateCounter
    from offload.proxy.rewrite.ceilings import Ceilings
    from offload.store.store import Store

    where, me, procs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = Store(where if "://" in where else Path(where), counter=EstimateCounter())
    ceilings = Ceilings(store)
    ceilings.get("acme")
    print("ready", flush=True)
    sys.stdin.readline()
    for j in range(n):
        ceilings.learn("acme", 100_000 - (j * procs + me))
    store.close()
    """
)


@pytest.mark.slow
def test_processes_learning_ceilings_at_once_keep_the_lowest(
    shared_store: Path | str, tmp_path: Path
) -> None:
    Store(shared_store, counter=EstimateCounter()).close()  # migrated before they start
    run_together(
        [
            [sys.executable, "-c", LEARNER, str(shared_store), str(w), str(LEARNERS), str(LESSONS)]
            for w in range(LEARNERS)
        ],
        [tmp_path / f"home-{w}" for w in range(LEARNERS)],
        timeout=300,
    )
    with Store(shared_store, counter=EstimateCounter()) as store:
        assert Ceilings(store).get("acme") == 100_000 - (LESSONS * LEARNERS - 1)


def test_another_harness_keeps_the_full_budget(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(learn_client_ceiling=True), EstimateCounter())
        big = pipe.rewrite(chat(12), N_CTX)
        pipe.rewrite(chat(3), N_CTX)
        pipe.rewrite(chat(4), N_CTX)
        other = pipe.rewrite(chat(14, system="You are another harness."), N_CTX)
        assert other.wire_tokens > int(big.wire_tokens * MARGIN)
        assert not other.ceiling_learned


def test_a_side_request_beside_a_long_history_teaches_nothing(tmp_path: Path) -> None:
    """A title request opening like the conversation is short, but the conversation goes
    on after it: the client never compacted."""
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(learn_client_ceiling=True), EstimateCounter())
        pipe.rewrite(chat(12), N_CTX)
        side = [*chat(0), {"role": "user", "content": "Title this conversation."}]
        assert not pipe.rewrite(side, N_CTX).ceiling_learned
        assert not pipe.rewrite(chat(13), N_CTX).ceiling_learned
        assert Ceilings(store).get(harness_key(chat(0)[:1])) is None


def test_growing_or_slightly_edited_histories_teach_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(learn_client_ceiling=True), EstimateCounter())
        pipe.rewrite(chat(8), N_CTX)
        edited = chat(8)
        edited[-1] = {"role": "user", "content": "changed my mind"}
        assert not pipe.rewrite(edited, N_CTX).ceiling_learned
        assert Ceilings(store).get(harness_key(chat(0)[:1])) is None


def test_a_capped_budget_scales_its_band_under_the_limit() -> None:
    budget = Budget.of(ProxySettings(), N_CTX)
    cut = capped(budget, 3000)
    assert cut.ceiling == 3000 and cut.target < cut.high < cut.ceiling
    assert capped(budget, 10**6) == budget


def test_learning_is_off_unless_asked(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(), EstimateCounter())
        pipe.rewrite(chat(12), N_CTX)
        assert not pipe.rewrite(chat(3), N_CTX).ceiling_learned
        assert not pipe.rewrite(chat(4), N_CTX).ceiling_learned
