"""Ranking tool definitions for a natural task description (pure, in memory).

FTS5 BM25 over prose descriptions misses most task phrasings ("open a PR" vs
``create_pull_request``), so deferred tools are ranked here: BM25 over fields weighted
name > title > description > parameter names, with identifiers split into words, a light
English stemmer, and a small synonym table mapping everyday words onto the vocabulary
MCP tools use. Deterministic: same catalog and query, same order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_WORD = re.compile(r"[A-Z]{2,}s\b|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_K1 = 1.2
_B = 0.6
_NAME_WEIGHT = 4
_TITLE_WEIGHT = 2
_DESC_WEIGHT = 1
_PARAM_WEIGHT = 1
_DESC_CHARS = 600  # the opening of a description says what the tool is for

# everyday word -> the term(s) tools use; applied to documents and queries alike
SYNONYMS: Mapping[str, tuple[str, ...]] = {
    "pr": ("pull", "request"),
    "prs": ("pull", "request"),
    "mr": ("pull", "request"),
    "bug": ("issue",),
    "ticket": ("issue",),
    "repo": ("repository",),
    "repos": ("repository",),
    "project": ("repository",),
    "codebase": ("repository",),
    "fetch": ("get",),
    "retrieve": ("get",),
    "show": ("list", "get"),
    "view": ("list", "get"),
    "read": ("get",),
    "display": ("list", "get"),
    "detail": ("get",),
    "lookup": ("get",),
    "enumerate": ("list",),
    "all": ("list",),
    "every": ("list",),
    "find": ("search",),
    "look": ("search",),
    "query": ("search",),
    "locate": ("search",),
    "grep": ("search", "code"),
    "make": ("create",),
    "new": ("create",),
    "start": ("create",),
    "edit": ("update",),
    "change": ("update",),
    "modify": ("update",),
    "rename": ("update", "title"),
    "set": ("update",),
    "remove": ("delete",),
    "erase": ("delete",),
    "drop": ("delete",),
    "destroy": ("delete",),
    "reply": ("comment",),
    "respond": ("comment",),
    "note": ("comment",),
    "feedback": ("review",),
    "approve": ("review",),
    "ci": ("workflow", "action"),
    "pipeline": ("workflow",),
    "build": ("workflow",),
    "job": ("job",),
    "rerun": ("run", "workflow"),
    "trigger": ("run", "trigger"),
    "dispatch": ("run", "trigger"),
    "favorite": ("star",),
    "favourite": ("star",),
    "bookmark": ("star",),
    "vulnerability": ("security", "advisory", "alert"),
    "vulnerable": ("security", "advisory", "alert"),
    "cve": ("security", "advisory"),
    "credential": ("secret",),
    "password": ("secret",),
    "token": ("secret",),
    "dependency": ("dependabot",),
    "dependencies": ("dependabot",),
    "organisation": ("organization",),
    "org": ("organization",),
    "orgs": ("organization",),
    "company": ("organization",),
    "people": ("user",),
    "person": ("user",),
    "profile": ("user", "me"),
    "account": ("user", "me"),
    "myself": ("me",),
    "ask": ("request",),
    "review": ("review", "reviewer"),
    "report": ("create", "issue"),
    "logged": ("me",),
    "whoami": ("me",),
    "readme": ("file", "content"),
    "recent": ("list",),
    "last": ("list", "latest"),
    "inbox": ("notification",),
    "unread": ("notification",),
    "snippet": ("gist",),
    "paste": ("gist",),
    "version": ("release", "tag"),
    "ship": ("release",),
    "forum": ("discussion",),
    "thread": ("discussion",),
    "contributor": ("collaborator",),
    "member": ("member", "team"),
    "owner": ("assignee",),
    "assign": ("assignee",),
    "reassign": ("assignee",),
    "close": ("state",),
    "reopen": ("state",),
    "closed": ("state",),
    "blame": ("blame",),
    "author": ("blame", "author"),
    "wrote": ("blame",),
    "upload": ("push", "file"),
    "write": ("create", "update"),
    "commit": ("commit",),
    "history": ("commit", "list"),
    "log": ("log",),
    "logs": ("log",),
    "output": ("log",),
    "failing": ("fail", "log"),
    "failed": ("fail", "log"),
    "tree": ("tree",),
    "directory": ("tree", "file"),
    "folder": ("tree", "file"),
    "subtask": ("sub", "issue"),
    "child": ("sub",),
    "parent": ("sub",),
    "duplicate": ("duplicate",),
    "copy": ("fork",),
    "clone": ("fork",),
    "emoji": ("reaction",),
    "react": ("reaction",),
    "milestone": ("milestone",),
    "priority": ("reprioritize",),
    "label": ("label",),
    "tagged": ("label",),
    "category": ("label",),
    "draft": ("draft",),
    "sync": ("update", "branch"),
    "rebase": ("update", "branch"),
    "behind": ("update", "branch"),
    "copilot": ("copilot",),
    "unsubscribe": ("subscription", "notification"),
    "watch": ("subscription", "notification"),
    "mute": ("subscription", "notification"),
    "ignore": ("subscription", "notification"),
}

_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "for",
        "in",
        "on",
        "at",
        "by",
        "with",
        "from",
        "into",
        "and",
        "or",
        "is",
        "are",
        "be",
        "i",
        "we",
        "you",
        "it",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "how",
        "do",
        "does",
        "please",
        "can",
        "could",
        "would",
        "should",
        "some",
        "any",
        "our",
        "their",
        "its",
        "about",
        "via",
        "using",
        "use",
        "s",
        "as",
        "not",
        "am",
        "was",
        "were",
        "has",
        "have",
        "had",
        "there",
        "here",
        "them",
        "they",
        "he",
        "she",
        "his",
        "her",
        "him",
        "your",
        "yours",
        "mine",
        "up",
        "out",
        "if",
        "then",
        "than",
        "so",
        "just",
        "also",
        "github",
        "git",
        "hub",
    ]
)


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed, a final -e (enough for tool vocabularies)."""
    return _drop_e(_suffix(word))


def _drop_e(w: str) -> str:
    # "merge", "merges", "merged" and "merging" all become "merg"
    return w[:-1] if len(w) > 4 and w.endswith("e") else w


def _suffix(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "ches", "shes", "xes", "zes")):
        return w[:-2]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
        return w[:-1] if len(w) > 3 and w[-1] == w[-2] else w
    if len(w) > 4 and w.endswith("ed") and not w.endswith("eed"):
        w = w[:-2] if not w.endswith("ied") else w[:-3] + "y"
        return w[:-1] if len(w) > 3 and w[-1] == w[-2] else w
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``, identifiers split (``listPullRequests``, ``list_prs``)."""
    return [w.lower() for w in _WORD.findall(text)]


# idioms whose words mislead one by one ("file" a bug is no file)
_PHRASES = (
    (re.compile(r"\bfile (?:a|an|the)? ?(?:bug|issue|ticket)", re.I), "create issue"),
    (re.compile(r"\bwho am i\b", re.I), "whoami"),
    (re.compile(r"\bopen (?:a|an|new|up) ", re.I), "create "),
    (re.compile(r"\b(show|give|tell|get) me\b", re.I), r"\1"),
)


def terms(text: str, expand: bool = False, keep: frozenset[str] = frozenset()) -> list[str]:
    """Index terms: words, stop words dropped, stemmed.

    With ``expand`` (queries) a word in the synonym table becomes the terms it maps to,
    and stays itself too when it is in ``keep`` (words that tool names use: "read").
    """
    if expand:
        for pattern, replacement in _PHRASES:
            text = pattern.sub(replacement, text)
    out: list[str] = []
    for w in words(text):
        if w in _STOP:
            continue
        stemmed = stem(w)
        mapped = (SYNONYMS.get(w) or SYNONYMS.get(stemmed)) if expand else None
        if mapped:
            own = (stemmed,) if stemmed in keep else ()
            out.extend(dict.fromkeys((*own, *(stem(m) for m in mapped))))
        else:
            out.append(stemmed)
    return out


@dataclass(frozen=True)
class ToolDoc:
    """What is searchable about one tool."""

    key: str  # the gateway name, ``server__tool``
    name: str
    title: str = ""
    description: str = ""
    params: tuple[str, ...] = ()


@dataclass
class ToolIndex:
    """BM25 over tool documents. Build with :meth:`build`."""

    docs: list[ToolDoc] = field(default_factory=list)
    tfs: list[Counter[str]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    df: Counter[str] = field(default_factory=Counter)
    name_terms: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, docs: Iterable[ToolDoc]) -> ToolIndex:
        """Index ``docs`` (order is kept for ties)."""
        index = cls()
        for doc in docs:
            bag: Counter[str] = Counter()
            for term in terms(doc.name):
                bag[term] += _NAME_WEIGHT
                index.name_terms.add(term)
            for term in terms(doc.title):
                bag[term] += _TITLE_WEIGHT
            for term in terms(doc.description[:_DESC_CHARS]):
                bag[term] += _DESC_WEIGHT
            for term in terms(" ".join(doc.params)):
                bag[term] += _PARAM_WEIGHT
            index.docs.append(doc)
            index.tfs.append(bag)
            index.lengths.append(sum(bag.values()))
            index.df.update(bag.keys())
        return index

    def search(
        self, query: str, limit: int = 5, keys: Sequence[str] | None = None
    ) -> list[tuple[ToolDoc, float]]:
        """The best ``limit`` tools for ``query`` (only those in ``keys`` when given)."""
        q = Counter(terms(query, expand=True, keep=frozenset(self.name_terms)))
        if not q or not self.docs:
            return []
        allowed = set(keys) if keys is not None else None
        n = len(self.docs)
        avg = sum(self.lengths) / n
        scored: list[tuple[float, int]] = []
        for i, (doc, tf) in enumerate(zip(self.docs, self.tfs, strict=True)):
            if allowed is not None and doc.key not in allowed:
                continue
            score = 0.0
            for term, qf in q.items():
                f = tf.get(term, 0)
                if not f:
                    continue
                idf = math.log(1 + (n - self.df[term] + 0.5) / (self.df[term] + 0.5))
                norm = f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * self.lengths[i] / avg))
                score += idf * norm * qf
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda s: (-s[0], s[1]))
        return [(self.docs[i], score) for score, i in scored[:limit]]


def doc_for(key: str, tool: Mapping[str, Any]) -> ToolDoc:
    """A :class:`ToolDoc` from a tool definition in wire shape (``inputSchema`` …)."""
    schema = tool.get("inputSchema") or tool.get("input_schema") or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    annotations = tool.get("annotations") or {}
    title = tool.get("title") or (annotations.get("title") if isinstance(annotations, dict) else "")
    return ToolDoc(
        key=key,
        name=str(tool.get("name", "")),
        title=str(title or ""),
        description=str(tool.get("description") or ""),
        params=tuple(props) if isinstance(props, dict) else (),
    )
