"""OpenAI chat messages: validation, canonical text, token sizes, head, groups and tail.

Pure helpers for the pipeline. A *group* is what windowing may never split: an assistant
message with ``tool_calls`` together with the ``tool`` messages that follow it (any other
message is a group of its own). The *head* is the leading system/developer messages plus
the first user message; it is pinned on the wire and identifies the conversation.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from offload.core.tokens import MESSAGE_OVERHEAD, TokenCounter
from offload.errors import ConfigError, InvalidInput

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_LEADING = frozenset({"system", "developer"})
_ANSWERS = frozenset({"tool", "function"})


def canonical(value: Any) -> str:
    """Deterministic compact JSON (sorted keys, UTF-8 kept): the identity of a value."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def validate(messages: Any, start: int = 0, stop: int | None = None) -> list[Message]:
    """Check that ``messages`` is a chat request's message list; raise InvalidInput if not.

    Accepts the roles of the OpenAI chat API (``system``, ``developer``, ``user``,
    ``assistant``, ``tool``, legacy ``function``); content is a string, a list of parts
    (objects) or null (assistant tool calls). Returns the list itself, unchanged.
    Only messages ``[start, stop)`` are looked at (the others are known to be valid).
    """
    if not isinstance(messages, list):
        raise InvalidInput(f"messages must be a list, got {type(messages).__name__}")
    if not messages:
        raise InvalidInput("messages is empty; send at least one message")
    for index in range(start, len(messages) if stop is None else min(stop, len(messages))):
        _validate_one(index, messages[index])
    return messages


def validate_head(messages: Any) -> int:
    """Check that ``messages`` is a non-empty list and that its messages :func:`head_end`
    reads are valid (the leading system/developer ones and the one after them), as
    :func:`validate` would; how many leading messages were checked."""
    validate(messages, 0, 0)
    index = 0
    while index < len(messages):
        _validate_one(index, messages[index])
        if messages[index]["role"] not in _LEADING:
            break
        index += 1
    return min(index + 1, len(messages))


def _validate_one(index: int, msg: Any) -> None:
    where = f"messages[{index}]"
    if not isinstance(msg, dict):
        raise InvalidInput(f"{where} must be an object, got {type(msg).__name__}")
    role = msg.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInput(
            f"{where} has unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}"
        )
    content = msg.get("content")
    if content is None:
        if role not in ("assistant", "function") and "content" not in msg:
            raise InvalidInput(f"{where} ({role}) has no content")
    elif isinstance(content, list):
        for part_index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidInput(f"{where}.content[{part_index}] must be an object with a type")
    elif not isinstance(content, str):
        raise InvalidInput(
            f"{where}.content must be a string, a list of parts or null, "
            f"got {type(content).__name__}"
        )
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise InvalidInput(f"{where} (tool) needs a string tool_call_id")
    calls = msg.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise InvalidInput(f"{where}.tool_calls must be a list on an assistant message")
        for call_index, call in enumerate(calls):
            if not isinstance(call, dict):
                raise InvalidInput(f"{where}.tool_calls[{call_index}] must be an object")


def content_text(msg: Message) -> str:
    """The message's content as one text: the string itself, or the parts' canonical JSON."""
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return canonical(content)


def calls_text(msg: Message) -> str:
    """An assistant's ``tool_calls`` as a chat template renders them ("" when it has none),
    for counting (:func:`rendered_calls`)."""
    calls = msg.get("tool_calls")
    return rendered_calls(calls) if calls else ""


def rendered_calls(calls: Any) -> str:
    """Tool calls as a chat template renders them, for counting their tokens: JSON with a
    space after each comma and colon, as ``tojson`` writes it, and non-ASCII characters
    escaped (the costlier of the two ways templates write them: an escaped "…" is 3-4
    tokens). The compact canonical form counted ~15 % fewer tokens than templates send."""
    return json.dumps(calls)


def message_tokens(counter: TokenCounter, msg: Message, content_tokens: int | None = None) -> int:
    """Tokens ``msg`` costs in a prompt: content, tool calls and the template's markers."""
    n = counter.count(content_text(msg)) if content_tokens is None else content_tokens
    calls = calls_text(msg)
    if calls:
        n += counter.count(calls)
    return n + MESSAGE_OVERHEAD


def digest(msg: Message) -> bytes:
    """sha256 of the message's canonical JSON (raw bytes)."""
    return hashlib.sha256(canonical(msg).encode("utf-8", "surrogatepass")).digest()


def chain(previous: str, messages: Sequence[Message]) -> str:
    """Extend a hex chain digest over ``messages`` (``""`` starts a chain)."""
    state = bytes.fromhex(previous) if previous else b""
    for msg in messages:
        state = hashlib.sha256(state + digest(msg)).digest()
    return state.hex()


def was_newest(messages: Sequence[Message], i: int) -> bool:
    """Whether message ``i`` was the newest of a request the client sent: the last one, or
    one the assistant answered next (a client asks right before each assistant message)."""
    return i == len(messages) - 1 or (
        i + 1 < len(messages) and messages[i + 1].get("role") == "assistant"
    )


def head_end(messages: Sequence[Message]) -> int:
    """Length of the pinned head: leading system/developer messages plus the first user one.

    A conversation that opens with something else pins only its leading system messages
    (at least the first message, so the head is never empty).
    """
    index = 0
    while index < len(messages) and messages[index]["role"] in _LEADING:
        index += 1
    if index < len(messages) and messages[index]["role"] == "user":
        index += 1
    return max(1, index)


def session_key(head: Sequence[Message], hint: str = "") -> str:
    """A stable id for the conversation that starts with ``head`` (16 hex characters).

    ``hint`` (the request's OpenAI ``user`` / Anthropic ``metadata.user_id``) tells apart
    conversations that open with identical messages; without one they share a session.
    """
    text = canonical(list(head)) + (f"\x00session:{hint}" if hint else "")
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def is_group_start(messages: Sequence[Message], index: int) -> bool:
    """False for a tool answer that belongs to the assistant tool call before it."""
    if messages[index]["role"] not in _ANSWERS or index == 0:
        return True
    return messages[index - 1]["role"] not in ({"assistant"} | _ANSWERS)


def is_page_boundary(messages: Sequence[Message], index: int) -> bool:
    """Whether paging may end right before ``index``: a group start, except a plain
    assistant reply to a user message, so that in a chat the first message kept after a
    range stub is the user's and the stub can take the assistant's turn (templates that
    insist on strict user/assistant alternation then still accept the wire)."""
    if index >= len(messages):
        return True
    if not is_group_start(messages, index):
        return False
    msg = messages[index]
    return not (
        msg["role"] == "assistant"
        and not msg.get("tool_calls")
        and index > 0
        and messages[index - 1]["role"] == "user"
    )


def range_role(messages: Sequence[Message], head: int, end: int) -> str:
    """The role of a range stub standing for messages ``[head, end)``: ``assistant`` when
    it sits between two user messages (alternation), else ``user`` (a note to the model
    reads better than words put in its mouth, which it might imitate)."""
    before = messages[head - 1]["role"] if head > 0 else None
    after = messages[end]["role"] if end < len(messages) else None
    return "assistant" if before == "user" and after == "user" else "user"


_REFUSES_SAME_ROLE = re.compile(r"roles must alternate", re.IGNORECASE)
ALTERNATION_SETTINGS = ("auto", "always", "never")


def wants_alternation(setting: str, chat_template: str = "") -> bool:
    """Whether to page chats only up to a user message (``Pipeline.rewrite(alternate=)``):
    ``always``, ``never``, or ``auto``: when the upstream's chat template refuses two
    messages of one role in a row (Gemma's and older Mistral templates raise "Conversation
    roles must alternate"). Raises ConfigError for any other setting."""
    if setting not in ALTERNATION_SETTINGS:
        raise ConfigError(
            f"proxy.alternate_roles must be one of {', '.join(ALTERNATION_SETTINGS)},"
            f" got {setting!r}"
        )
    if setting == "auto":
        return bool(_REFUSES_SAME_ROLE.search(chat_template))
    return setting == "always"


def group_start(messages: Sequence[Message], index: int, floor: int = 0) -> int:
    """The start of the group containing ``index`` (never below ``floor``)."""
    while index > floor and not is_group_start(messages, index):
        index -= 1
    return index


def protect_start(messages: Sequence[Message], head: int, tail: int) -> int:
    """First index of the protected recent tail: the last ``tail`` messages, widened
    backwards to a whole group, and never inside the head."""
    start = max(head, len(messages) - max(0, tail))
    return group_start(messages, start, head) if start < len(messages) else len(messages)


def source_of(messages: Sequence[Message], index: int) -> str:
    """Where a tool answer came from, for its stub: the tool's name ("" for other roles)."""
    msg = messages[index]
    if msg["role"] not in _ANSWERS:
        return ""
    name = msg.get("name")
    if isinstance(name, str) and name:
        return name
    call_id = msg.get("tool_call_id")
    for back in range(index - 1, -1, -1):
        prev = messages[back]
        if prev["role"] == "assistant":
            for call in prev.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id") == call_id:
                    fn = call.get("function")
                    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                        return str(fn["name"])
            break
    return "tool"
