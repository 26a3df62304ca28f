"""What sessions may spend, as an admin sets it in hostagent.yaml, and the rules over it. Pure.

A budget is to tokens and money what MemoryMax is to memory: a cap per day, for all of one
user's sessions together and for each session alone. It is the admin's, never the caller's: no
method takes one. A session whose owner (or itself) has reached a budget is stopped when its
turn ends, dormant with reason ``budget``, and resumes once a new day starts or an admin lifts
the owner's budget for the day (``LiftBudget``).

Prices per model are the admin's too: they give a cost to the usage of a CLI that states none
(Codex, Gemini, Qwen, Copilot). Without one the cost stays unknown; nothing is guessed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from hostagent import yamlfile
from hostagent.usage import Usage

HOUR_USEC = 3_600 * 1_000_000


@dataclass(frozen=True)
class Budget:
    """A day's cap; 0 (tokens) or None (cost) is no cap."""

    tokens: int = 0
    cost_usd: float | None = None

    def __bool__(self) -> bool:
        return bool(self.tokens) or self.cost_usd is not None

    def passed_by(self, used: Usage) -> str:
        """What used has reached of this budget, said for people, or "" while within it."""
        if self.tokens and used.tokens >= self.tokens:
            return f"{used.tokens} tokens today, the budget is {self.tokens}"
        if self.cost_usd is not None and (used.cost_usd or 0.0) >= self.cost_usd:
            return f"${used.cost_usd or 0.0:.2f} today, the budget is ${self.cost_usd:.2f}"
        return ""


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind; input is the part neither read from nor written
    to the cache."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def cost(self, used: Usage) -> float:
        fresh = max(used.input - used.cache_read - used.cache_write, 0)
        return (
            fresh * self.input
            + used.output * self.output
            + used.cache_read * self.cache_read
            + used.cache_write * self.cache_write
        ) / 1_000_000


@dataclass(frozen=True)
class Budgets:
    user: Budget = Budget()  # each user's sessions together, per day
    session: Budget = Budget()  # each session alone, per day
    users: dict[str, Budget] = field(default_factory=dict)  # by user name: replaces user
    prices: dict[str, Price] = field(default_factory=dict)  # by model

    def for_user(self, user_name: str) -> Budget:
        return self.users.get(user_name, self.user)


def priced(used: Usage, prices: dict[str, Price]) -> Usage:
    """used with a cost from the admin's price for its model where the CLI stated none."""
    price = prices.get(used.model)
    if used.cost_usd is not None or price is None:
        return used
    return replace(used, cost_usd=price.cost(used))


def day_of(usec: int) -> int:
    """The local day a moment falls in, as the microsecond its midnight starts (budgets count
    per day of the host's clock, as people do)."""
    t = time.localtime(usec // 1_000_000)
    midnight = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))
    return int(midnight) * 1_000_000


def hour_of(usec: int) -> int:
    return usec - usec % HOUR_USEC


def over_budget(
    budgets: Budgets, user_name: str, user_today: Usage, session_today: Usage, lifted: bool
) -> str:
    """Why a session must stop at its turn's end, or "": its owner's sessions together, or
    it alone, have reached a day's budget, and no admin lifted the owner's for today."""
    if lifted:
        return ""
    why = budgets.for_user(user_name).passed_by(user_today)
    if why:
        return f"its owner's sessions used {why}"
    why = budgets.session.passed_by(session_today)
    return f"it used {why}" if why else ""


# ---- hostagent.yaml: budgets and prices -----------------------------------------------------


def _budget(doc: yamlfile.Document, value: object, fld: str) -> Budget:
    data = yamlfile.expect_mapping(doc, value, fld)
    yamlfile.reject_unknown(doc, data, {"tokens_per_day", "cost_usd_per_day"}, fld)
    tokens = data.get("tokens_per_day", 0)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= 10**15:
        raise doc.error(f"{fld}.tokens_per_day", "must be a whole number of tokens (0: none)")
    cost = data.get("cost_usd_per_day")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost <= 10**9
    ):
        raise doc.error(f"{fld}.cost_usd_per_day", "must be a number of dollars")
    return Budget(tokens, None if cost is None else float(cost))


def _price(doc: yamlfile.Document, value: object, fld: str) -> Price:
    data = yamlfile.expect_mapping(doc, value, fld)
    kinds = ("input", "output", "cache_read", "cache_write")
    yamlfile.reject_unknown(doc, data, set(kinds), fld)
    numbers: dict[str, float] = {}
    for kind in kinds:
        number = data.get(kind, 0)
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise doc.error(f"{fld}.{kind}", "must be dollars per million tokens, 0 or more")
        numbers[kind] = float(number)
    return Price(**numbers)


def parse_budgets(doc: yamlfile.Document, data: dict[str, object]) -> Budgets:
    """The ``budgets`` and ``prices`` sections of hostagent.yaml."""
    section = yamlfile.expect_mapping(doc, data.get("budgets", {}), "budgets")
    yamlfile.reject_unknown(doc, section, {"user", "session", "users"}, "budgets")
    per_user = yamlfile.expect_mapping(doc, section.get("users", {}), "budgets.users")
    prices = yamlfile.expect_mapping(doc, data.get("prices", {}), "prices")
    return Budgets(
        _budget(doc, section.get("user", {}), "budgets.user"),
        _budget(doc, section.get("session", {}), "budgets.session"),
        {str(k): _budget(doc, v, f"budgets.users.{k}") for k, v in per_user.items()},
        {str(k): _price(doc, v, f"prices.{k}") for k, v in prices.items()},
    )
