"""offload.sections: cache-conscious, reversible context sections for agent-CLI authors.

- :class:`Sections` applies budgets to named sections: one that fits passes unchanged, one
  over budget becomes a deterministic compressed form advertising ``ctx:sha256:<hash>``
  of its original, which the store keeps for ``[sections] ttl_days``; :meth:`Sections.cut`
  is the reversible hard cut.
- :func:`openai_tool`, :func:`anthropic_tool`, :func:`mcp_tool` define the retrieve tool;
  :class:`Retriever` (``Sections.retriever()``) answers it, also as a small MCP server.
- :func:`align`, :func:`align_prompts` and :func:`format_report` say which sections keep
  the prompt cache warm and how to order them; :func:`cache_key` names a stable prompt
  (OpenAI's ``prompt_cache_key``).

See ``docs/library.md``.
"""

from offload.sections.alignment import (
    AlignmentReport,
    SectionStat,
    align,
    align_history,
    align_prompts,
    cache_key,
    format_report,
    split_prompt,
)
from offload.sections.builder import BuiltSection, Section, Sections, join
from offload.sections.compress import Budget, advertise, extractive
from offload.sections.cut import CutResult, plan_cut
from offload.sections.retrieve import (
    DEFAULT_TOOL_NAME,
    Retriever,
    RetrieveResult,
    anthropic_tool,
    input_schema,
    mcp_tool,
    openai_tool,
)

__all__ = [
    "DEFAULT_TOOL_NAME",
    "AlignmentReport",
    "Budget",
    "BuiltSection",
    "CutResult",
    "RetrieveResult",
    "Retriever",
    "Section",
    "SectionStat",
    "Sections",
    "advertise",
    "align",
    "align_history",
    "align_prompts",
    "anthropic_tool",
    "cache_key",
    "extractive",
    "format_report",
    "input_schema",
    "join",
    "mcp_tool",
    "openai_tool",
    "plan_cut",
    "split_prompt",
]
