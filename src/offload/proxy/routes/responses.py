"""OpenAI Responses requests (``POST /v1/responses``) as chat-completions requests.

The proxy keeps no responses of its own, so a request must carry the whole conversation in
``input``, as a client with ``store: false`` sends it. Supported: ``instructions``;
``input`` as a string or an array of items: messages (role ``user``, ``assistant``,
``system`` or ``developer``, content a string or ``input_text`` / ``output_text`` /
``refusal`` parts), ``function_call`` and ``function_call_output`` (their ``call_id`` kept as
the chat tool-call id), ``reasoning`` items (dropped: a chat upstream cannot read them back);
``tools`` of type ``function`` and ``namespace`` (its functions offered upstream as
``NAMESPACE__NAME``, their calls named back); ``tool_choice`` (``auto``, ``none``, ``required``, one
function, ``allowed_tools``); ``max_output_tokens``, ``temperature``, ``top_p``,
``parallel_tool_calls``, ``stream``; ``text.format`` (``text``, ``json_object``,
``json_schema``); ``user`` (else ``prompt_cache_key``) names the session. Accepted and
ignored: ``store`` and ``metadata`` (nothing is stored upstream), ``include``,
``reasoning``, ``truncation``, ``service_tier``.

Refused with a 400 that says why: ``previous_response_id`` and ``conversation`` (state kept
on OpenAI's service), ``background``, stored ``prompt`` templates, ``item_reference`` items,
built-in and other non-function tools, image, file and audio inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from offload.errors import InvalidInput

_STATEFUL = {
    "previous_response_id": "this proxy keeps no responses",
    "conversation": "this proxy keeps no conversations",
    "background": "this proxy runs no background responses",
    "prompt": "this proxy has no stored prompt templates",
}
_SEND_INPUT = "send the whole conversation in 'input' with each request"
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_CHOICES = frozenset({"auto", "none", "required"})
#: joins a namespace tool's name and a function's in the chat tool name offered upstream
NAMESPACE_SEP = "__"
# what a client that adds a built-in tool on its own can set to leave it out
_BUILT_IN_HINTS = {"web_search": '; Codex CLI leaves it out with web_search = "disabled"'}


@dataclass(frozen=True)
class ChatRequest:
    """A Responses request as chat: the chat request, and the functions it offers from a
    namespace (chat name -> (namespace, name)) so their calls are named back."""

    payload: dict[str, Any]
    namespaced: Mapping[str, tuple[str, str]]


def to_chat(body: dict[str, Any]) -> ChatRequest:
    """The chat-completions request equivalent to a Responses request (its ``messages``
    are checked no further than :func:`offload.proxy.routes.chat.validate_messages` does)."""
    for key, why in _STATEFUL.items():
        if body.get(key):
            raise InvalidInput(f"'{key}' is not supported: {why}; {_SEND_INPUT}")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput("'instructions' must be a string")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages.extend(input_messages(body.get("input")))
    payload: dict[str, Any] = {"messages": messages, **_settings(body)}
    namespaced: dict[str, tuple[str, str]] = {}
    tools = chat_tools(body.get("tools"), namespaced)
    choice = body.get("tool_choice")
    if choice is not None:
        tools, chosen = chat_tool_choice(choice, tools)
        if tools:  # a chat upstream may refuse a tool_choice without tools
            payload["tool_choice"] = chosen
    if tools:
        payload["tools"] = tools
    return ChatRequest(payload, namespaced)


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request's settings from a Responses request's: sampling, the output limit,
    the session's name, the answer's format, streaming."""
    out: dict[str, Any] = {}
    for key in ("model", "temperature", "top_p", "parallel_tool_calls"):
        if body.get(key) is not None:
            out[key] = body[key]
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInput("'max_output_tokens' must be a positive integer")
        out["max_tokens"] = limit
    session = body.get("user") or body.get("prompt_cache_key")
    if isinstance(session, str) and session:
        out["user"] = session  # chat's field; it also names the proxy's session
    response_format = chat_response_format(body.get("text"))
    if response_format is not None:
        out["response_format"] = response_format
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def input_messages(items: Any) -> list[dict[str, Any]]:
    """The chat messages of a request's ``input`` (a string, or an array of items)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise InvalidInput("'input' must be a string or a non-empty array of items")
    built = _Messages()
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidInput(f"{where} must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            built.message(item, where)
        elif kind == "function_call":
            built.call(item, where)
        elif kind == "function_call_output":
            built.output(item, where)
        elif kind == "reasoning":
            continue  # the model's own notes: a chat upstream has no way to read them back
        elif kind == "item_reference":
            raise InvalidInput(f"{where}: 'item_reference' names a stored item; {_SEND_INPUT}")
        else:
            raise InvalidInput(
                f"{where}: item type {kind!r} is not supported (this proxy serves messages,"
                " function_call and function_call_output items)"
            )
    if not built.out:
        raise InvalidInput("'input' holds no message")
    return built.out


class _Messages:
    """Chat messages built item by item: a ``function_call`` joins the assistant message
    before it (chat puts an answer's text and its tool calls in one message)."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []

    def _last_assistant(self) -> dict[str, Any] | None:
        last = self.out[-1] if self.out else None
        return last if last is not None and last["role"] == "assistant" else None

    def message(self, item: dict[str, Any], where: str) -> None:
        role = _ROLES.get(str(item.get("role")))
        if role is None:
            raise InvalidInput(f"{where}.role must be one of {', '.join(_ROLES)}")
        text = content_text(item.get("content"), f"{where}.content")
        last = self._last_assistant()
        if role == "assistant" and last is not None and not last.get("content"):
            # an answer's text given after its calls: still the same chat message
            last["content"] = text
            return
        self.out.append({"role": role, "content": text})

    def call(self, item: dict[str, Any], where: str) -> None:
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"{where}.call_id must be a non-empty string")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{where}.name must be a non-empty string")
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            raise InvalidInput(f"{where}.arguments must be a string (JSON text)")
        last = self._last_assistant()
        if last is None:
            last = {"role": "assistant", "content": None}
            self.out.append(last)
        name = namespaced_name(item.get("namespace"), name)
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        last.setdefault("tool_calls", []).append(call)

    def output(self, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"{where}.call_id must be a non-empty string")
        text = content_text(item.get("output", ""), f"{where}.output")
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": text})


def content_text(content: Any, where: str) -> str:
    """The text of a message's content (a string or text parts); media parts are refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"{where} must be a string or an array of content parts")
    parts: list[str] = []
    for j, part in enumerate(content):
        fields: dict[str, Any] = part if isinstance(part, dict) else {}
        kind = fields.get("type")
        if kind in _TEXT_PARTS:
            parts.append(str(fields.get("text", "")))
        elif kind == "refusal":
            parts.append(str(fields.get("refusal", "")))
        elif kind in _MEDIA_PARTS:
            raise InvalidInput(
                f"{where}[{j}]: {kind} is not supported: this proxy passes text only"
            )
        else:
            raise InvalidInput(f"{where}[{j}]: content part type {kind!r} is not supported")
    return "\n".join(parts)


def chat_tools(tools: Any, namespaced: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """Responses function tools (flat: ``name``, ``parameters`` beside ``type``) in chat's
    nested shape. A ``namespace`` tool's functions are offered as ``NAMESPACE__NAME``, each
    recorded in ``namespaced`` (chat name -> (namespace, name)) to name its calls back; any
    other tool type is refused."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidInput("'tools' must be an array")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        fields: dict[str, Any] = tool if isinstance(tool, dict) else {}
        kind = fields.get("type")
        if kind == "function":
            out.append(_function_tool(fields, f"tools[{i}]", ""))
        elif kind == "namespace":
            namespace = fields.get("name")
            members = fields.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(members, list):
                raise InvalidInput(f"tools[{i}]: a namespace needs a name and a list of tools")
            for j, member in enumerate(members):
                where = f"tools[{i}].tools[{j}]"
                if not isinstance(member, dict) or member.get("type") != "function":
                    raise InvalidInput(f"{where}: only function tools pass through this proxy")
                chat = _function_tool(member, where, namespace)
                namespaced[chat["function"]["name"]] = (namespace, member["name"])
                out.append(chat)
        else:
            hint = _BUILT_IN_HINTS.get(str(kind), "")
            raise InvalidInput(
                f"tools[{i}]: tool type {kind!r} is not supported: only function tools pass"
                f" through this proxy (built-in tools run on OpenAI's own service){hint}"
            )
    _distinct(out, namespaced)
    return out


def _distinct(tools: list[dict[str, Any]], namespaced: Mapping[str, tuple[str, str]]) -> None:
    """Refuse two functions offered under one chat name where a namespace made it (``a`` /
    ``b__c`` and ``a__b`` / ``c``, or a namespace's ``b`` and a plain ``a__b``): the
    upstream's call of that name could not be named back to the one it meant, and the
    client would run the other."""
    seen: set[str] = set()
    for tool in tools:
        name = tool["function"]["name"]
        if name in seen and name in namespaced:
            raise InvalidInput(
                f"tools: two functions would both be offered as {name!r} (a namespace's name"
                f" and its function's, joined by {NAMESPACE_SEP!r}); rename one"
            )
        seen.add(name)


def _function_tool(fields: dict[str, Any], where: str, namespace: str) -> dict[str, Any]:
    """One function tool in chat's shape (its name prefixed by its namespace, if any)."""
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}.name must be a non-empty string")
    params = fields.get("parameters") or {"type": "object", "properties": {}}
    fn: dict[str, Any] = {"name": namespaced_name(namespace, name), "parameters": params}
    for key in ("description", "strict"):
        if fields.get(key) is not None:
            fn[key] = fields[key]
    return {"type": "function", "function": fn}


def namespaced_name(namespace: Any, name: str) -> str:
    """The chat name of a function in a namespace (``NAMESPACE__NAME``; no namespace: the
    name itself)."""
    return f"{namespace}{NAMESPACE_SEP}{name}" if isinstance(namespace, str) and namespace else name


def chat_tool_choice(
    choice: Any, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str | dict[str, Any]]:
    """The chat tools and ``tool_choice`` for a Responses ``tool_choice`` (``allowed_tools``
    narrows the tools offered to the ones it names)."""
    if isinstance(choice, str) and choice in _CHOICES:
        return tools, choice
    fields: dict[str, Any] = choice if isinstance(choice, dict) else {}
    kind, name = fields.get("type"), fields.get("name")
    if kind == "function" and isinstance(name, str) and name:
        return tools, {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":
        mode, allowed = fields.get("mode", "auto"), fields.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list):
            raise InvalidInput("'tool_choice' allowed_tools needs a mode and a list of tools")
        names = {
            namespaced_name(t.get("namespace"), str(t.get("name")))
            for t in allowed
            if isinstance(t, dict)
        }
        return [t for t in tools if t["function"]["name"] in names], mode
    raise InvalidInput(
        f"'tool_choice' {choice!r} is not supported: use auto, none, required, a function"
        " or allowed_tools"
    )


def chat_response_format(text: Any) -> dict[str, Any] | None:
    """Chat's ``response_format`` for a Responses ``text`` setting (None: plain text)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return None
    fields: dict[str, Any] = fmt if isinstance(fmt, dict) else {}
    kind = fields.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        keys = ("name", "schema", "strict", "description")
        return {"type": "json_schema", "json_schema": {k: fields[k] for k in keys if k in fields}}
    raise InvalidInput(f"'text.format' type {kind!r} is not supported")
