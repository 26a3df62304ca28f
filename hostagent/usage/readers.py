"""One reader per agent CLI's record of what its model calls used, each into ``usage.Usage``.
Pure, and the standard library only.

A reader takes a conversation's whole record as the CLI wrote it (a transcript, a session file,
rows of its database as JSON lines), so reading it again gives the same figures. The daemon runs
these as the session's owner: ``daemon/follow/usagehelper.py`` makes one program of this module
and ``usage/__init__.py``, so neither may import anything else of hostagent but ``usage``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from hostagent.usage import Usage, count, total


def one_call(input: int, output: int, cache_read: int, cache_write: int, model: object) -> Usage:
    """One model call's figures; its cost, where the CLI states one, is the record's."""
    return Usage(input, output, cache_read, cache_write, None, 1, str(model or ""))


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


def _documents(text: str) -> list[Any]:
    """The JSON documents of a text, one after another (a file rewritten whole, or two files
    read one after the other); what follows one cut short (being rewritten) is left out."""
    found: list[Any] = []
    decoder, at = json.JSONDecoder(), 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        try:
            document, at = decoder.raw_decode(text, at)
        except ValueError:
            break
        found.append(document)
    return found


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
        read = count(usage.get("cache_read_input_tokens"))
        write = count(usage.get("cache_creation_input_tokens"))
        calls[key] = one_call(
            count(usage.get("input_tokens")) + read + write,
            count(usage.get("output_tokens")),
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
        count(last.get("input_tokens")),
        count(last.get("output_tokens")),
        count(last.get("cached_input_tokens")),
        count(last.get("cache_write_input_tokens")),
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
            count(tokens.get("input")) + count(tokens.get("tool")),
            count(tokens.get("output")) + count(tokens.get("thoughts")),
            count(tokens.get("cached")),
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
            count(usage.get("promptTokenCount")),
            count(usage.get("candidatesTokenCount")),
            count(usage.get("cachedContentTokenCount")),
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
            count(usage.get("inputTokens")),
            count(usage.get("outputTokens")),
            count(usage.get("cacheReadTokens")),
            count(usage.get("cacheWriteTokens")),
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
        read = count(_dig(tokens, "cache", "read"))
        write = count(_dig(tokens, "cache", "write"))
        if (
            not _dig(entry, "time", "completed")
            and not any(count(tokens.get(k)) for k in ("input", "output", "reasoning"))
            and not (read or write)
        ):
            continue  # a reply still streaming: its row is written with its tokens at its end
        stated = entry.get("cost")
        cost += float(stated) if isinstance(stated, int | float) and stated > 0 else 0.0
        calls[str(entry.get("id") or len(calls))] = one_call(
            count(tokens.get("input")) + read + write,
            count(tokens.get("output")) + count(tokens.get("reasoning")),
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
        read, write = count(usage.get("cacheRead")), count(usage.get("cacheWrite"))
        stated = _dig(usage, "cost", "total")
        cost += float(stated) if isinstance(stated, int | float) and stated > 0 else 0.0
        calls[str(entry.get("id") or len(calls))] = one_call(
            count(usage.get("input")) + read + write,
            count(usage.get("output")),
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
        read, write = count(row.get("cache_read_tokens")), count(row.get("cache_write_tokens"))
        stated = row.get("actual_cost_usd") or row.get("estimated_cost_usd")
        cost = float(stated) if isinstance(stated, int | float) and stated > 0 else None
        found = found + Usage(
            count(row.get("input_tokens")) + read + write,
            count(row.get("output_tokens")),
            read,
            write,
            cost,
            count(row.get("api_call_count")),
            str(row.get("model") or ""),
        )
    return found


def from_cline(text: str) -> Usage:
    """Cline's messages file (``<id>.messages.json``, one JSON document, rewritten whole): each
    assistant message's ``metrics``, one per model call, whose input is the prompt as the
    provider counted it. A ``cost`` is in USD where Cline priced the model."""
    messages = _dig((_documents(text) or [None])[0], "messages")
    found = Usage()
    for message in messages if isinstance(messages, list) else []:
        metrics = _dig(message, "metrics")
        if _dig(message, "role") != "assistant" or not isinstance(metrics, dict):
            continue
        stated = metrics.get("cost")
        found = found + Usage(
            count(metrics.get("inputTokens")),
            count(metrics.get("outputTokens")),
            count(metrics.get("cacheReadTokens")),
            count(metrics.get("cacheWriteTokens")),
            float(stated) if isinstance(stated, int | float) and stated > 0 else None,
            1,
            str(_dig(message, "modelInfo", "id") or ""),
        )
    return found


def from_continue(text: str) -> Usage:
    """Continue's session file (``<id>.json``, one JSON document, rewritten whole): each
    assistant message's ``usage`` in OpenAI's names (the prompt holds the cached part, the
    completion the reasoning). A session forked from another (``cn --fork``, its resume) starts
    with a copy of that one's messages, their usage included, while its own running sum
    (``usage``) starts at nothing: the calls counted are the newest messages whose figures make
    up that sum, so a copy is not counted twice. Its ``totalCost`` is in USD, as Continue
    prices the model (a guess of its own for a model it does not know)."""
    document = (_documents(text) or [None])[0]
    history = _dig(document, "history")
    calls = [
        one_call(
            count(usage.get("prompt_tokens")),
            count(usage.get("completion_tokens")),
            count(_dig(usage, "prompt_tokens_details", "cached_tokens")),
            0,
            usage.get("model"),
        )
        for item in (history if isinstance(history, list) else [])
        if _dig(item, "message", "role") == "assistant"
        and isinstance(usage := _dig(item, "message", "usage"), dict)
    ]
    stated = _dig(document, "usage")
    own = calls
    if isinstance(stated, dict):
        sum_ = (count(stated.get("promptTokens")), count(stated.get("completionTokens")))
        for k in range(len(calls) + 1):  # the shortest run of newest calls that makes the sum
            newest = total(calls[len(calls) - k :])
            if (newest.input, newest.output) == sum_:
                own = calls[len(calls) - k :]
                break
    found = total(own)
    cost = _dig(stated, "totalCost")
    if own and isinstance(cost, int | float) and cost > 0:
        return replace(found, cost_usd=float(cost))
    return found


def from_vibe(text: str) -> Usage:
    """Vibe's newest snapshot of a conversation's store: its projection state (the running sum
    in ``snapshot.session.tokenUsage``, whose input holds what the cache read), followed by the
    runtime state beside it, whose succeeded ``completion`` actions are the model calls. No
    cost is recorded."""
    found = Usage()
    for document in _documents(text):
        tokens = _dig(document, "snapshot", "session", "tokenUsage")
        if isinstance(tokens, dict):
            found = replace(
                found,
                input=count(tokens.get("inputTokens")),
                output=count(tokens.get("outputTokens")),
                cache_read=count(tokens.get("cachedInputTokens")),
            )
        actions = _dig(document, "actions")
        if isinstance(actions, list):
            calls = [a for a in actions if _dig(a, "kind") == "completion"]
            found = replace(found, calls=sum(_dig(a, "state") == "succeeded" for a in calls))
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
    "cline": from_cline,
    "vibe": from_vibe,
    "continue": from_continue,
    "aider": from_aider,
}
