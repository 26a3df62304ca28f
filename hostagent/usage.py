"""What a session's agent has used: tokens by kind, and money where the CLI states it. Pure.

Every CLI keeps its own record of what each model call used, each in its own shape and with
its own traps (a call written twice, running sums beside per-call figures, input with or
without its cached part). This module reads each shape into one ``Usage``, with the same
meaning whatever the CLI:

- ``input``: every token sent, the part read from or written to the provider's cache included;
- ``output``: every token received, reasoning included;
- ``cache_read``, ``cache_write``: of ``input``, what the cache served and what it stored;
- ``cost_usd``: the money the CLI says the calls cost, or None where it says nothing (never a
  guess: a price an admin sets is applied elsewhere);
- ``calls``: the model calls counted.

A reader takes a conversation's whole record as the CLI wrote it, so reading it again gives the
same figures: the daemon keeps one ``Usage`` per conversation and adds those up, which is how
totals survive restarts, resumes and a conversation id that changes. docs/presets.md, "Usage",
says where each CLI's figures come from and what each leaves out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    calls: int = 0
    model: str = ""  # the model of the last call counted

    def __add__(self, other: Usage) -> Usage:
        # A cost stays unknown only while no part of the sum states one: one CLI states it
        # for every call or for none.
        cost = None
        if self.cost_usd is not None or other.cost_usd is not None:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            cost,
            self.calls + other.calls,
            other.model or self.model,
        )

    @property
    def tokens(self) -> int:
        return self.input + self.output

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cost_usd": self.cost_usd,
            "calls": self.calls,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        cost = data.get("cost_usd")
        return cls(
            _count(data.get("input")),
            _count(data.get("output")),
            _count(data.get("cache_read")),
            _count(data.get("cache_write")),
            float(cost) if isinstance(cost, int | float) and cost >= 0 else None,
            _count(data.get("calls")),
            str(data.get("model") or ""),
        )


def one_call(input: int, output: int, cache_read: int, cache_write: int, model: object) -> Usage:
    """One model call's figures; its cost, where the CLI states one, is the record's."""
    return Usage(input, output, cache_read, cache_write, None, 1, str(model or ""))


def total(usages: Iterable[Usage]) -> Usage:
    result = Usage()
    for usage in usages:
        result = result + usage
    return result


def since(before: Usage, after: Usage) -> Usage:
    """What after adds to before, never less than nothing (a record the CLI rewrote shorter
    takes nothing back)."""
    cost = None
    if after.cost_usd is not None:
        cost = max(after.cost_usd - (before.cost_usd or 0.0), 0.0)
    return Usage(
        max(after.input - before.input, 0),
        max(after.output - before.output, 0),
        max(after.cache_read - before.cache_read, 0),
        max(after.cache_write - before.cache_write, 0),
        cost,
        max(after.calls - before.calls, 0),
        after.model,
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dig(data: object, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _records(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines text; a line cut short (the CLI is writing it) or not
    an object is passed over."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


# --- one reader per CLI's record ------------------------------------------------------------


def from_claude(text: str) -> Usage:
    """Claude Code's transcript: each call's ``message.usage`` on its assistant lines, repeated
    on every line of the same message (one per content block), so counted once per message
    id. Anthropic's input leaves the cache out. Claude states the cost of the whole session
    only when it ends (its last ``cost-state`` line); until then the cost is unknown."""
    calls: dict[str, Usage] = {}
    cost: float | None = None
    for entry in _records(text):
        if entry.get("type") == "cost-state":
            stated = entry.get("totalCostUSD")
            cost = float(stated) if isinstance(stated, int | float) else cost
            continue
        message = entry.get("message")
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if not isinstance(usage, dict):
            continue
        key = str(message.get("id") or entry.get("requestId") or entry.get("uuid"))
        read = _count(usage.get("cache_read_input_tokens"))
        write = _count(usage.get("cache_creation_input_tokens"))
        calls[key] = one_call(
            _count(usage.get("input_tokens")) + read + write,
            _count(usage.get("output_tokens")),
            read,
            write,
            message.get("model"),
        )
    found = total(calls.values())
    return replace(found, cost_usd=cost) if cost is not None else found


def from_codex(text: str) -> Usage:
    """Codex's rollout file: its ``token_count`` events carry the thread's running sum, so the
    last one is the total (input with its cached part; output with its reasoning). Codex
    states no cost."""
    last: dict[str, Any] | None = None
    calls = 0
    model = ""
    for entry in _records(text):
        payload = entry.get("payload")
        if entry.get("type") == "turn_context" and isinstance(payload, dict):
            model = str(payload.get("model") or model)
        if _dig(payload, "type") != "token_count":
            continue
        usage = _dig(payload, "info", "total_token_usage")
        if isinstance(usage, dict):
            last = usage
            calls += 1
    if last is None:
        return Usage()
    return Usage(
        _count(last.get("input_tokens")),
        _count(last.get("output_tokens")),
        _count(last.get("cached_input_tokens")),
        _count(last.get("cache_write_input_tokens")),
        None,
        calls,
        model,
    )


def from_gemini(text: str) -> Usage:
    """Gemini CLI's chat file: a ``gemini`` message record's ``tokens``, written again (same id)
    when the message is updated, so the last record of each id counts. Its input holds the
    cached part but not the tool-use prompt; its output leaves the thoughts out. No cost."""
    calls: dict[str, Usage] = {}
    for entry in _records(text):
        tokens = entry.get("tokens")
        if entry.get("type") != "gemini" or not isinstance(tokens, dict):
            continue
        calls[str(entry.get("id"))] = one_call(
            _count(tokens.get("input")) + _count(tokens.get("tool")),
            _count(tokens.get("output")) + _count(tokens.get("thoughts")),
            _count(tokens.get("cached")),
            0,
            entry.get("model"),
        )
    return total(calls.values())


def from_qwen(text: str) -> Usage:
    """Qwen Code's chat file: each assistant record's ``usageMetadata``, in Gemini's names but
    with OpenAI's meanings (the prompt holds the cached part, the candidates the reasoning,
    which ``thoughtsTokenCount`` repeats). Its telemetry records repeat the same calls and
    are not counted. No cost."""
    calls: dict[str, Usage] = {}
    for entry in _records(text):
        usage = entry.get("usageMetadata")
        if entry.get("type") != "assistant" or not isinstance(usage, dict):
            continue
        calls[str(entry.get("uuid"))] = one_call(
            _count(usage.get("promptTokenCount")),
            _count(usage.get("candidatesTokenCount")),
            _count(usage.get("cachedContentTokenCount")),
            0,
            entry.get("model"),
        )
    return total(calls.values())


def from_copilot(text: str) -> Usage:
    """Copilot CLI's events: one ``session.usage_record`` per call, a sub-agent's included
    (the totals at exit repeat them and are not counted). Its ``cost`` is a premium-request
    multiplier, not money: the cost stays unknown."""
    calls: dict[str, Usage] = {}
    for entry in _records(text):
        usage = _dig(entry, "data", "usage")
        if entry.get("type") != "session.usage_record" or not isinstance(usage, dict):
            continue
        key = str(usage.get("apiCallId") or entry.get("id") or len(calls))
        calls[key] = one_call(
            _count(usage.get("inputTokens")),
            _count(usage.get("outputTokens")),
            _count(usage.get("cacheReadTokens")),
            _count(usage.get("cacheWriteTokens")),
            usage.get("model"),
        )
    return total(calls.values())


def from_opencode(text: str) -> Usage:
    """OpenCode's messages (its database's ``message`` rows of one session, each row's ``data``
    with its ``id``, one JSON object a line): an assistant message's ``tokens`` and ``cost``
    per call. Its input leaves out what the cache read and wrote, its output the reasoning.
    The cost is in USD, from the model's price; OpenCode says $0 for a model it has no price
    for, so a total of 0 is taken as unknown. A reply still streaming (no tokens, not completed)
    is no call yet: counted, it would say a call used nothing until the next reading."""
    calls: dict[str, Usage] = {}
    cost = 0.0
    for entry in _records(text):
        tokens = entry.get("tokens")
        if entry.get("role") != "assistant" or not isinstance(tokens, dict):
            continue
        read = _count(_dig(tokens, "cache", "read"))
        write = _count(_dig(tokens, "cache", "write"))
        if (
            not _dig(entry, "time", "completed")
            and not any(_count(tokens.get(k)) for k in ("input", "output", "reasoning"))
            and not (read or write)
        ):
            continue  # a reply still streaming: its row is written with its tokens at its end
        stated = entry.get("cost")
        cost += float(stated) if isinstance(stated, int | float) and stated > 0 else 0.0
        calls[str(entry.get("id") or len(calls))] = one_call(
            _count(tokens.get("input")) + read + write,
            _count(tokens.get("output")) + _count(tokens.get("reasoning")),
            read,
            write,
            entry.get("modelID"),
        )
    found = total(calls.values())
    return replace(found, cost_usd=cost) if cost > 0 else found


def from_pi(text: str) -> Usage:
    """Pi's session file: each assistant ``message`` entry's ``usage``, whose input leaves out
    what the cache read and wrote, and whose output holds the reasoning it also names apart.
    The cost is in USD from the model's price; 0 (a model it has no price for) is unknown."""
    calls: dict[str, Usage] = {}
    cost = 0.0
    for entry in _records(text):
        message = entry.get("message")
        usage = _dig(message, "usage")
        if entry.get("type") != "message" or not isinstance(usage, dict):
            continue
        read, write = _count(usage.get("cacheRead")), _count(usage.get("cacheWrite"))
        stated = _dig(usage, "cost", "total")
        cost += float(stated) if isinstance(stated, int | float) and stated > 0 else 0.0
        calls[str(entry.get("id") or len(calls))] = one_call(
            _count(usage.get("input")) + read + write,
            _count(usage.get("output")),
            read,
            write,
            _dig(message, "model"),
        )
    found = total(calls.values())
    return replace(found, cost_usd=cost) if cost > 0 else found


def from_hermes(text: str) -> Usage:
    """Hermes's session rows (its database's ``sessions`` row of one id, one JSON object a
    line): the session's running totals, whose input leaves out what the cache read and
    wrote, with its count of API calls. The cost is in USD, as billed or else as estimated;
    0 (a model it has no price for) is unknown."""
    found = Usage()
    for row in _records(text):
        if "api_call_count" not in row:
            continue
        read, write = _count(row.get("cache_read_tokens")), _count(row.get("cache_write_tokens"))
        stated = row.get("actual_cost_usd") or row.get("estimated_cost_usd")
        cost = float(stated) if isinstance(stated, int | float) and stated > 0 else None
        found = found + Usage(
            _count(row.get("input_tokens")) + read + write,
            _count(row.get("output_tokens")),
            read,
            write,
            cost,
            _count(row.get("api_call_count")),
            str(row.get("model") or ""),
        )
    return found


_AIDER = re.compile(
    r"^> Tokens: (?P<sent>[\d.]+)(?P<sent_unit>[kM]?) sent"
    r"(?:, (?P<write>[\d.]+)(?P<write_unit>[kM]?) cache write)?"
    r"(?:, (?P<hit>[\d.]+)(?P<hit_unit>[kM]?) cache hit)?"
    r", (?P<received>[\d.]+)(?P<received_unit>[kM]?) received\."
    r"(?: Cost: \$(?P<cost>[\d.]+) message)?",
    re.M,
)
_UNITS = {"": 1, "k": 1000, "M": 1_000_000}


def from_aider(text: str) -> Usage:
    """Aider's chat history (``.aider.chat.history.md``): a ``> Tokens: … sent, … received.
    Cost: $… message`` line after each reply, rounded as shown (4.3k), for every run of Aider
    in that directory since the text given starts. The cost is in USD where Aider knows the
    model's price."""
    found = Usage()
    for line in _AIDER.finditer(text):

        def count(name: str, line: re.Match[str] = line) -> int:
            value = line[name]
            return round(float(value) * _UNITS[line[f"{name}_unit"]]) if value else 0

        cost = line["cost"]
        found = found + Usage(
            count("sent"),
            count("received"),
            count("hit"),
            count("write"),
            float(cost) if cost else None,
            1,
        )
    return found


READERS: dict[str, Callable[[str], Usage]] = {
    "claude": from_claude,
    "codex": from_codex,
    "gemini": from_gemini,
    "qwen": from_qwen,
    "copilot": from_copilot,
    "opencode": from_opencode,
    "pi": from_pi,
    "hermes": from_hermes,
    "aider": from_aider,
}
