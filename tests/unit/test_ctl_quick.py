"""hostagentctl's quick path: the lines it takes mean what argparse makes of them, it prints
what the full path prints, and neither --help nor parsing any verb imports an event loop or a
D-Bus library (``python -X importtime``)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dbus_fast import Message, MessageType, Variant
from hypothesis import given
from hypothesis import strategies as st

from hostagent.cli.ctl_args import bare_json_is_short, parser
from hostagent.cli.ctl_quick import OUTPUT, recognise
from hostagent.cli.verbs import MANY, ONE, VERBS, listing
from hostagent.client.quick import parse_message
from tests.unit.test_bus_export import serve

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("asyncio", "dbus_fast")  # what a line that only parses must not import


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["list"],
        ["--system", "list", "--no-legend"],
        ["list", "--user", "-q"],
        ["list", "a*", "b", "--state", "running"],
        ["list", "--state=dormant", "--json"],
        ["list", "-o", "json-pretty"],
        ["list", "--output=short", "--no-pager"],
        ["--json=pretty", "status", "x"],
        ["status", "x", "--no-ask-password"],
    ],
)
def test_a_line_the_quick_path_takes_means_what_argparse_makes_of_it(argv: list[str]) -> None:
    quick = recognise(argv)
    assert quick is not None
    full = parser().parse_args(bare_json_is_short(argv or ["list"]))
    if full.output:  # as ctl._main folds -o into --json
        full.json = OUTPUT[full.output]
    for field in ("verb", "system", "json", "no_legend", "no_pager", "quiet", "no_ask_password"):
        assert getattr(quick, field) == getattr(full, field), field
    if full.verb == "list":
        assert (quick.patterns, quick.state) == (full.patterns, full.state)
    else:
        assert quick.name == full.name


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["list", "--help"],
        ["-H", "host", "list"],
        ["-M", "box", "list"],
        ["--address", "unix:path=/x", "list"],
        ["list", "--owner", "alice"],
        ["list", "--system", "--user"],
        ["list", "--state"],
        ["list", "-o", "yaml"],
        ["list", "--json=yaml"],
        ["list", "--", "x"],
        ["status"],
        ["status", "a", "b"],
        ["status", "a", "--state", "running"],
        ["stop", "a"],
        ["lsit"],
        ["list", "--fleet"],
    ],
)
def test_any_other_line_goes_to_argparse(argv: list[str]) -> None:
    assert recognise(argv) is None


def ageless(text: str) -> str:
    """text with each age ("3s ago", "2m5s") one word, and the columns' padding one space:
    the two runs compared are a second apart now and then."""
    return re.sub(r" +", " ", re.sub(r"\b(\d+(ms|s|min|m|h|d))+\b", "AGE", text))


def _imports(code: str, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stderr


def _imported(importtime: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines() if "|" in line}


def test_help_and_parsing_every_verb_import_no_event_loop_and_no_dbus_library() -> None:
    helped = _imports("from hostagent.cli.ctl import main; main(['--help'])")
    assert "usage: hostagentctl" not in helped  # it went to stdout
    lines = [[v.name, *(["x"] if v.takes in (ONE, MANY) else [])] for v in VERBS]
    lines = [[*line, "lift"] if line == ["budget"] else line for line in lines]
    parsed = _imports(
        "import sys; from hostagent.cli.ctl_args import parser\n"
        f"for line in {lines!r}: parser().parse_args(line)\n"
    )
    for importtime in (helped, parsed):
        modules = _imported(importtime)
        assert "hostagent.cli.ctl_args" in modules, importtime[-2000:]
        assert not {m for m in modules if m.split(".")[0] in HEAVY}


def test_the_completion_reads_the_verb_table() -> None:
    rows = [line.split() for line in listing().splitlines()]
    assert [r[0] for r in rows] == [v.name for v in VERBS]
    assert {r[1] for r in rows} == {"-", ONE, MANY}
    completion = (ROOT / "completion" / "hostagentctl").read_text()
    assert "--list-verbs" in completion
    shown = subprocess.run(
        [sys.executable, "-m", "hostagent.cli.ctl", "--list-verbs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == listing()


def test_quick_list_and_status_print_what_the_full_path_prints(
    tmp_path: Path, bus_address: str
) -> None:
    env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": bus_address, "COLUMNS": "120"}
    full = "import sys; from hostagent.cli.ctl import _main; sys.exit(_main(sys.argv[1:]))"
    quick = "import sys; from hostagent.cli.ctl import main; sys.exit(main(sys.argv[1:]))"

    async def ctl(code: str, *argv: str) -> tuple[int, str, str, set[str]]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-X",
            "importtime",
            "-c",
            code,
            "--user",
            *argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await proc.communicate()
        lines = err.decode().splitlines()
        said = "\n".join(line for line in lines if not line.startswith("import time:"))
        return proc.returncode or 0, out.decode(), said, _imported(err.decode())

    async def body() -> None:
        _, server, _ = await serve(tmp_path, bus_address)
        from hostagent.client.library import Client

        client = await Client.connect(system=False, address=bus_address)
        for name in ("alpha", "beta", "2.task-b"):  # the last one's object path is escaped
            await client.create(name, "shell", str(tmp_path), {"args": Variant("as", ["x"])})
        await client.stop("beta")
        for argv in (
            ["list"],
            ["list", "--no-legend"],
            ["list", "b*"],
            ["list", "--state", "stopped"],
            ["list", "--json"],
            ["list", "-o", "json-pretty"],
            ["status", "alpha"],
            ["status", "beta"],
            ["status", "beta", "--json"],
            ["status", "2.task-b"],
            ["status", "nope"],
        ):
            code, out, said, modules = await ctl(quick, *argv)
            assert not {m for m in modules if m.split(".")[0] in HEAVY}, argv
            again, shown, told, _ = await ctl(full, *argv)
            assert (code, ageless(out), said) == (again, ageless(shown), told), argv
        # The packages' launcher starts Python without site: the quick path needs none, nor re
        # and what it imports (a fifth of the verb's time), and any other verb loads site
        # before it imports dbus-fast.
        launcher = (ROOT / "packaging" / "hostagentctl").read_text().replace("@SITE@", str(ROOT))
        for argv in (["list"], ["info"]):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-S",
                "-X",
                "importtime",
                "-c",
                launcher,
                "--user",
                *argv,
                cwd="/",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            printed, why = await proc.communicate()
            assert proc.returncode == 0 and printed, (argv, why[-2000:])
            if argv == ["list"]:
                modules = _imported(why.decode())
                assert not {m.split(".")[0] for m in modules} & {*HEAVY, "re", "enum"}, modules
        await client.aclose()
        server.disconnect()

    asyncio.run(asyncio.wait_for(body(), 60))


def test_the_completion_offers_every_long_option_of_new() -> None:
    """new's options are typed most: each one the parser takes is completed."""
    from hostagent.cli.ctl_args import parser

    sub = next(a for a in parser()._actions if a.dest == "verb")
    new = sub.choices["new"]  # type: ignore[index]
    common = {o for a in parser()._actions for o in a.option_strings}
    taken = {o for a in new._actions for o in a.option_strings if o.startswith("--")}
    completion = (ROOT / "completion" / "hostagentctl").read_text()
    offered = re.search(r'new\)\s+COMPREPLY=\(\$\(compgen -W "([^"]*)"', completion)
    assert offered is not None
    global_ones = common | {"--help", "--no-pager", "--json", "--no-legend"}
    assert taken - global_ones - set(offered.group(1).split()) == set()


# D-Bus strings: UTF-8 with no NUL.
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"))
# Each type a Session property has, or may come to have, as a variant.
VALUES = st.one_of(
    TEXT.map(lambda s: Variant("s", s)),
    st.sampled_from(["/", "/org/hostagent/HostAgent1/session/a"]).map(lambda p: Variant("o", p)),
    st.booleans().map(lambda b: Variant("b", b)),
    st.integers(0, (1 << 64) - 1).map(lambda n: Variant("t", n)),
    st.integers(0, (1 << 32) - 1).map(lambda n: Variant("u", n)),
    st.integers(-(1 << 31), (1 << 31) - 1).map(lambda n: Variant("i", n)),
    st.integers(-(1 << 63), (1 << 63) - 1).map(lambda n: Variant("x", n)),
    st.floats(allow_nan=False).map(lambda d: Variant("d", d)),
    st.lists(TEXT, max_size=3).map(lambda a: Variant("as", a)),
    st.dictionaries(TEXT, TEXT, max_size=3).map(lambda d: Variant("a{ss}", d)),
)


@given(st.dictionaries(TEXT, VALUES, max_size=40))
def test_the_quick_client_reads_a_property_dict_as_dbus_fast_wrote_it(
    props: dict[str, Variant],
) -> None:
    """GetAll's reply, read by the quick client's unrolled a{sv} loop: every key and value."""
    reply = Message(
        message_type=MessageType.METHOD_RETURN,
        reply_serial=7,
        signature="a{sv}",
        body=[props],
        destination=":1.5",
        sender=":1.1",
    )
    kind, serial, _, body = parse_message(bytes(reply._marshall(False)))
    assert (kind, serial) == (2, 7)
    assert body == [{k: v.value for k, v in props.items()}]
