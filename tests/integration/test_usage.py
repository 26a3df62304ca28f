"""What sessions use, and budgets, on a real systemd with the stand-in agent (which records each
answer as a model call in Claude's usage fields: 1200 tokens in, 200 of them cached, 50 out).
A turn's usage is on the bus and in every client, survives a daemon restart and a resume, and
is in the journal when the run ends; GetUsage keeps removed sessions and shows a user only
their own. A budget stops its user's session at the end of a turn, leaves another user's
alone, refuses a resume, and an admin's lift resumes it. The real CLIs:
tests/integration/test_real_agents.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from hostagent.daemon.bus.session import session_path
from hostagent.daemon.host import checkpoint
from hostagent.usage import Usage
from tests.integration.helpers import create, props, until, usage_counting, wait_screen
from tests.sandbox import Sandbox

CONFIG = "/etc/hostagent/hostagent.yaml"
ONE = Usage(1200, 50, 200, 0, None, 1, "demo-1")  # one answer of the stand-in agent


def times(n: int) -> Usage:
    return Usage(ONE.input * n, ONE.output * n, ONE.cache_read * n, 0, None, n, ONE.model)


def turn(sb: Sandbox, name: str, text: str, user: str = "alice") -> None:
    sb.ctl("send", name, text, user=user, system=True).check()
    wait_screen(sb, name, f"You said: {text}")


def used(sb: Sandbox, name: str, calls: int, user: str = "alice") -> Usage:
    return usage_counting(sb, name, user, calls)


def usage_rows(sb: Sandbox, user: str) -> list[dict]:
    return json.loads(sb.ctl("--json", "usage", "--since", "-1d", user=user, system=True).stdout)


def calls_of(rows: list[dict], uid: int) -> int:
    return sum(r["calls"] for r in rows if r["owner"] == uid and r["preset"] == "demo-agent")


def test_a_turn_is_on_the_bus_in_every_client_and_survives_restart_and_resume(
    sb: Sandbox,
) -> None:
    alice = sb.uid("alice")
    before = calls_of(usage_rows(sb, "alice"), alice)
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    try:
        wait_screen(sb, name, "> ")
        assert used(sb, name, 0) == Usage()  # nothing said yet: nothing used
        turn(sb, name, "count me")
        assert used(sb, name, 1) == ONE
        listed = json.loads(sb.ctl("--json", "list", name, user="alice", system=True).stdout)
        assert listed[0]["usage"] == {**ONE.to_dict(), "cost_usd": None}
        table = sb.ctl("list", name, user="alice", system=True).stdout
        assert "TOKENS" in table and "1.2k" in table, table
        status = sb.ctl("status", name, user="alice", system=True).stdout
        assert "1.2k in (200 cache read), 50 out, 1 call, cost unknown; demo-1" in status
        busctl = (
            sb.run(
                "busctl",
                "get-property",
                "org.hostagent.HostAgent1",
                session_path(name),
                "org.hostagent.HostAgent1.Session",
                "Usage",
                user="alice",
            )
            .check()
            .stdout
        )
        assert '"input" t 1200' in busctl and '"cost_usd"' not in busctl, busctl

        sb.daemon_restart()
        assert used(sb, name, 1) == ONE
        sb.ctl("stop", name, user="alice", system=True).check()

        def ends() -> list[dict]:
            out = sb.run("journalctl", f"HOSTAGENT_SESSION={name}", "-o", "json").stdout
            return [json.loads(x) for x in out.splitlines() if "HOSTAGENT_INPUT_TOKENS" in x]

        until(ends, "the run's usage in the journal")
        ended = ends()[-1]
        assert (ended["HOSTAGENT_INPUT_TOKENS"], ended["HOSTAGENT_OUTPUT_TOKENS"]) == ("1200", "50")
        assert ended["HOSTAGENT_OWNER_UID"] == str(alice)

        sb.ctl("resume", name, user="alice", system=True).check()
        wait_screen(sb, name, "> ")
        turn(sb, name, "count me again")
        assert used(sb, name, 2) == times(2)
    finally:
        sb.ctl("rm", name, user="alice", system=True)
    # The books keep a removed session's calls; a user sees only their own rows.
    assert calls_of(usage_rows(sb, "alice"), alice) == before + 2
    assert {r["owner"] for r in usage_rows(sb, "bob")} <= {sb.uid("bob")}
    assert alice in {r["owner"] for r in usage_rows(sb, "root")}


def test_a_turn_made_while_the_daemon_was_down_is_counted_within_5s_of_its_start(
    sb: Sandbox,
) -> None:
    """Sessions found at start are followed as new ones are: the turn alice had with her
    agent through tmux itself, while no daemon ran, is in its Usage soon after the start."""
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    try:
        wait_screen(sb, name, "> ")
        turn(sb, name, "before")
        assert used(sb, name, 1) == ONE
        session_id = props(sb, name, "alice")["AgentSessionId"]
        transcript = f"/home/alice/.demo-agent/sessions/{session_id}.jsonl"
        sb.daemon_stop()
        try:
            sock = f"/run/hostagent/{sb.uid('alice')}/{name}.sock"
            sb.run(
                "tmux", "-S", sock, "send-keys", "-t", "main", "meanwhile", "Enter", user="alice"
            ).check()

            def answered() -> bool:
                text = sb.run("cat", transcript, user="alice").stdout
                return text.count('"assistant"') >= 2

            until(answered, "the agent's second answer in its transcript")
        finally:
            sb.daemon_start()
        assert usage_counting(sb, name, "alice", 2, timeout=5.0) == times(2)
    finally:
        sb.ctl("rm", name, user="alice", system=True)


def budget_over_today(sb: Sandbox, user: str, tokens: int) -> None:
    """user may use what they used today so far and tokens more."""
    rows = json.loads(sb.ctl("--json", "usage", "--since", "today").stdout)
    today = sum(r["input"] + r["output"] for r in rows if r["owner"] == sb.uid(user))
    sb.sh(
        f"cat > {CONFIG}",
        input=f"budgets:\n  users:\n    {user}:\n      tokens_per_day: {today + tokens}\n",
    ).check()
    sb.ctl("reload").check()


@pytest.fixture
def budget(sb: Sandbox) -> Iterator[None]:
    """alice may use what she used today so far and 2000 tokens more (two answers pass it);
    bob has no budget."""
    budget_over_today(sb, "alice", 2000)
    yield
    sb.run("rm", "-f", CONFIG)
    sb.ctl("reload").check()


def test_a_budget_stops_its_users_session_at_a_turns_end_until_an_admin_lifts_it(
    sb: Sandbox, budget: None
) -> None:
    alices = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    bobs = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="bob")
    try:
        for name in (alices, bobs):
            wait_screen(sb, name, "> ")
        turn(sb, alices, "first")  # 1250 tokens: within the budget
        used(sb, alices, 1)
        assert props(sb, alices, "alice")["State"] == "running"
        # 2500: over it once the turn has ended (its answer is drawn, then the session stops,
        # too soon to be sure of seeing the screen)
        sb.ctl("send", alices, "second", user="alice", system=True).check()
        until(lambda: props(sb, alices, "alice")["State"] == "dormant", "alice's session stopped")
        assert Usage.from_dict(props(sb, alices, "alice")["Usage"]).calls == 2
        stopped = props(sb, alices, "alice")
        assert stopped["DormantReason"] == "budget"
        assert "Stopped at its turn's end: its owner's sessions used" in stopped["LastError"]
        refused = sb.ctl("resume", alices, user="alice", system=True)
        assert refused.returncode != 0 and "hostagentctl budget lift" in refused.stderr

        turn(sb, bobs, "bob goes on", user="bob")  # another user's session: untouched
        assert used(sb, bobs, 1, user="bob") == ONE
        assert props(sb, bobs, "bob")["State"] == "running"

        denied = sb.ctl("budget", "lift", "alice", "--no-ask-password", user="bob", system=True)
        assert denied.returncode != 0 and "Access denied" in denied.stderr
        lifted = sb.ctl("budget", "lift", "alice").check().stdout
        assert f"resumed {alices}" in lifted
        assert props(sb, alices, "alice")["State"] == "running"
        wait_screen(sb, alices, "> ")
        turn(sb, alices, "third")  # lifted for the day: the turn's end stops nothing
        used(sb, alices, 3)
        assert props(sb, alices, "alice")["State"] == "running"
    finally:
        sb.ctl("rm", alices, user="alice", system=True)
        sb.ctl("rm", bobs, user="bob", system=True)


def test_a_budget_stop_the_daemon_died_in_ends_dormant_and_a_lift_resumes_it(
    sb: Sandbox,
) -> None:
    """The stop's intent is on disk with the stop: killed once the scope is gone and before
    the end is recorded, the daemon ends the session at its next start as the budget stop
    would have (dormant, reason budget, why in LastError), and a lift brings it back."""
    budget_over_today(sb, "carol", 2000)
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="carol")
    try:
        wait_screen(sb, name, "> ")
        turn(sb, name, "first", user="carol")  # 1250 tokens: within the budget
        used(sb, name, 1, user="carol")
        with sb.park(checkpoint.STOP_DONE, name) as parked:
            sb.ctl("send", name, "second", user="carol", system=True).check()
            parked.wait()  # the budget stop: its scope is gone, its end not yet recorded
            sb.daemon_kill()
        sb.daemon_start()
        ended = props(sb, name, "carol")
        assert (ended["State"], ended["DormantReason"]) == ("dormant", "budget")
        assert "Stopped at its turn's end" in ended["LastError"]
        lifted = sb.ctl("budget", "lift", "carol").check().stdout
        assert f"resumed {name}" in lifted
        assert props(sb, name, "carol")["State"] == "running"
    finally:
        sb.ctl("rm", name, user="carol", system=True)
        sb.run("rm", "-f", CONFIG)
        sb.ctl("reload").check()


def test_a_turn_in_the_books_whose_record_a_kill_kept_from_disk_is_counted_once(
    sb: Sandbox,
) -> None:
    """Killed once a reading is in the owner's books and before the session's record says
    it: the next daemon reads the same figures again, and the books count the turn once."""
    uid = sb.uid("bob")
    before = calls_of(usage_rows(sb, "bob"), uid)
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="bob")
    try:
        wait_screen(sb, name, "> ")
        with sb.park(checkpoint.USAGE_ENTERED, name) as parked:
            sb.ctl("send", name, "first", user="bob", system=True).check()
            parked.wait()  # the first reading that finds the turn: in the books, not the record
            assert calls_of(usage_rows(sb, "bob"), uid) == before + 1
            assert Usage.from_dict(props(sb, name, "bob")["Usage"]).calls == 0
            sb.daemon_kill()
        sb.daemon_start()
        assert used(sb, name, 1, user="bob") == ONE
        assert calls_of(usage_rows(sb, "bob"), uid) == before + 1
    finally:
        sb.ctl("rm", name, user="bob", system=True)


def test_torn_books_are_set_aside_and_the_days_budget_still_holds(sb: Sandbox) -> None:
    """bob's books cut short while the daemon is down: set aside in corrupt/, rebuilt from
    his sessions' records, and his budget, spent today, still refuses a new session. (bob:
    the other tests here lift alice's and carol's budgets for the day.)"""
    uid = sb.uid("bob")
    budget_over_today(sb, "bob", 1000)
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="bob")
    try:
        wait_screen(sb, name, "> ")
        sb.ctl("send", name, "over", user="bob", system=True).check()  # 1250 > 1000
        until(lambda: props(sb, name, "bob")["State"] == "dormant", "the budget stop")
        sb.daemon_stop()
        books = f"/var/lib/hostagent/usage/{uid}.json"
        sb.sh(f"head -c 30 {books} > {books}.cut && mv {books}.cut {books}").check()
        sb.daemon_start()
        refused = sb.ctl(
            "new", "--preset", "shell", "--name", "after-torn", user="bob", system=True
        )
        assert refused.returncode != 0 and "budget" in refused.stderr, refused.stderr
        assert (
            sb.run("sh", "-c", f"ls /var/lib/hostagent/corrupt/usage-{uid}.json.*").returncode == 0
        )
        assert f"usage/{uid}.json are unreadable" in sb.journal(lines=40)
    finally:
        sb.ctl("rm", name, user="bob", system=True)
        sb.run("rm", "-f", CONFIG)
        sb.ctl("reload").check()
