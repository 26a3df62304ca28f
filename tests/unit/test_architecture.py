"""The package's shape, as docs/architecture.md draws it: no import circle, the client and the
programs never import the daemon, the model never imports dbus-fast, a session's record is
changed only through Registry.change, only the edges start processes, modules stay readable in
one sitting, and nothing cites notes kept outside the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hostagent"
MAX_LINES = 400
# The model and the pure decisions: no bus, no I/O edges.
MODEL = {
    "hostagent.session",
    "hostagent.activity",
    "hostagent.recovery",
    "hostagent.launch",
    "hostagent.options",
    "hostagent.config",
    "hostagent.presets",
    "hostagent.errors",
    "hostagent.permissions",
    "hostagent.identity",
    "hostagent.daemon.state.registry",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module path imports, TYPE_CHECKING and function-local imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {m: {i for i in imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_import_circle() -> None:
    circles = sorted(m for m in MODULES if m in reach(m))
    assert circles == []


@pytest.mark.parametrize("side", ["hostagent.client", "hostagent.cli"])
def test_the_clients_never_import_the_daemon(side: str) -> None:
    for module in (m for m in MODULES if m.startswith(side)):
        daemon = sorted(m for m in reach(module) if m.startswith("hostagent.daemon"))
        assert daemon == [], f"{module} reaches {daemon}"


def test_the_model_never_imports_dbus_fast() -> None:
    for module in sorted(MODEL):
        outside = {i for m in reach(module) | {module} for i in imports(MODULES[m])}
        assert not any(i.startswith("dbus_fast") for i in outside), module


def test_modules_are_readable_in_one_sitting() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_nothing_cites_notes_outside_the_repository() -> None:
    # Spelled in pieces, so that this file does not match what it looks for.
    notes = ["DESIGN" + " §", "STYLE" + " rule", "research" + "/agent-clis", r"\.\./" + "shared/"]
    pattern = re.compile("|".join(notes))
    files = [
        p
        for d in ("hostagent", "tests", "bench", "dev", "docs", "man", "packaging", "units")
        for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in ("", ".py", ".md", ".yaml", ".1", ".5", ".8", ".spec")
    ] + [ROOT / "README.md"]
    citing = sorted(str(p.relative_to(ROOT)) for p in files if pattern.search(p.read_text()))
    assert citing == []


def set_attributes(tree: ast.AST) -> list[ast.Attribute]:
    """Every attribute the code assigns to, augmented and annotated assignments included."""
    found: list[ast.Attribute] = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in ast.walk(tgt)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        found += [t for t in targets if isinstance(t, ast.Attribute)]
    return found


def record_writes(path: Path) -> list[int]:
    """Lines that set a field of a session record: `record.x = …`, `session.record.x = …`
    (augmented too), or `setattr(record, …)`."""

    def is_record(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "record") or (
            isinstance(node, ast.Attribute) and node.attr == "record"
        )

    tree = ast.parse(path.read_text())
    setattrs = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and node.args
        and is_record(node.args[0])
    ]
    return setattrs + [a.lineno for a in set_attributes(tree) if is_record(a.value)]


def test_no_module_writes_a_session_record_but_through_change() -> None:
    """Registry.change stamps, moves through the state machine, writes and announces; a field
    set anywhere else would skip some of that."""
    writes = {
        f"{module}:{line}"
        for module, path in MODULES.items()
        if module != "hostagent.daemon.state.registry"
        for line in record_writes(path)
    }
    assert sorted(writes) == []


def store_writes(path: Path) -> list[int]:
    """Lines that write a record through the store (`….store.save(…)`, `store.save(…)`)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "save"
        and (
            (isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "store")
            or (isinstance(node.func.value, ast.Name) and node.func.value.id == "store")
        )
    ]


def test_only_the_state_layer_writes_a_record() -> None:
    """A record is written by Registry.change, or first by Registry.enroll (which registers
    and announces the new session with it): never around them."""
    writes = sorted(
        f"{m}:{line}"
        for m, p in MODULES.items()
        if m.startswith("hostagent.daemon.") and folder(m) != "state"
        for line in store_writes(p)
    )
    assert writes == []


# A Session's runtime fields: what only lives while the daemon runs.
RUNTIME_FIELDS = {
    "removed",
    "waiters",
    "last_hook",
    "killed_with",
    "unit_result",
    "pane_pid",
    "unfollow",
    "watch",
    "owner",
    "_owner",
    "settling",
    "paths",
}


def runtime_writes(path: Path) -> list[int]:
    """Lines that set a session's runtime field (`session.watch = …`, `s.pane_pid = …`) or
    change its waiters (`session.waiters.add(…)`)."""

    def is_session(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("session", "s")) or (
            isinstance(node, ast.Attribute) and node.attr == "session"
        )

    tree = ast.parse(path.read_text())
    waiters = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("add", "discard", "remove", "clear")
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "waiters"
        and is_session(node.func.value.value)
    ]
    return waiters + [
        a.lineno for a in set_attributes(tree) if a.attr in RUNTIME_FIELDS and is_session(a.value)
    ]


def test_a_sessions_runtime_changes_only_through_the_registry() -> None:
    writes = sorted(
        f"{module}:{line}"
        for module, path in MODULES.items()
        if module != "hostagent.daemon.state.registry"
        for line in runtime_writes(path)
    )
    assert writes == []


# Processes are started only in host/: helpers run as a session's owner (owner.py), the shim
# that becomes a session's tmux server (heldchild.py), systemctl --user for --install-user
# (userunit.py, never while the daemon serves).
STARTING_CALLS = {
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
    ("subprocess", "run"),
    ("subprocess", "Popen"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("os", "fork"),
    ("os", "system"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
}


def process_starts(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and (
            (node.func.value.id, node.func.attr) in STARTING_CALLS
            or (node.func.value.id == "os" and node.func.attr.startswith(("exec", "spawn")))
        )
    ]


# The daemon's modules that start a process, as docs/architecture.md names them.
PROCESS_STARTERS = {
    f"hostagent.daemon.host.{name}"
    for name in (
        "forker",
        "forking",
        "namespace",
        "pidone",
        "heldchild",
        "journal",
        "sandboxing",
        "userunit",
    )
}


def test_the_processes_are_started_where_the_architecture_says() -> None:
    starters = {
        module
        for module, path in MODULES.items()
        if module.startswith("hostagent.daemon") and process_starts(path)
    }
    assert starters == PROCESS_STARTERS
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    for module in PROCESS_STARTERS:
        assert f"`host/{module.rsplit('.', 1)[1]}.py`" in text, module


def test_no_process_is_started_outside_host() -> None:
    starts = {
        f"{module}:{line}"
        for module, path in MODULES.items()
        if module.startswith("hostagent.daemon") and folder(module) != "host"
        for line in process_starts(path)
    }
    assert sorted(starts) == []


# The daemon's role folders, lowest first, and what each may import of the others (the model,
# hostagent/*.py and the shared bus helpers in hostagent/bus/, is below them all).
# docs/architecture.md draws them.
FOLDERS = ("state", "host", "follow", "ops", "bus")
MAY_IMPORT = {
    "state": set(),
    "host": {"state.paths"},
    "follow": {"state", "host"},
    "ops": {"state", "host", "follow"},
    "bus": {"state", "host", "follow", "ops"},
    "top": {"state", "host", "follow", "ops", "bus"},  # core.py and main.py: the wiring
}
# The stateful edges: the ports' implementations, which only the wiring makes.
EDGE_CLASSES = {
    "hostagent.daemon.host.systemd.Systemd",
    "hostagent.daemon.host.tmux.Tmux",
    "hostagent.daemon.host.scope.Scopes",
    "hostagent.daemon.host.owners.Owners",
    "hostagent.daemon.host.worktree.Worktrees",
    "hostagent.daemon.host.journal.JournalReaders",
    "hostagent.daemon.host.owner.Helpers",
}
# What is done with an owner's rights, which everything outside host/ asks of the owner port.
OWNER_RUNNERS = {
    f"hostagent.daemon.host.owner.{name}"
    for name in ("Helpers", "run_as_owner", "sh_as_owner", "check_cwd", "build_env")
}
WIRING = {"hostagent.daemon.core", "hostagent.daemon.server"}


def folder(module: str) -> str | None:
    """state, host, follow, ops, bus or top for a daemon module; None elsewhere."""
    if not module.startswith("hostagent.daemon"):
        return None
    part = module.split(".")[2] if module.count(".") >= 2 else ""
    return part if part in FOLDERS else "top"


def allowed(importer: str, imported: str) -> bool:
    mine, theirs = folder(importer), folder(imported)
    if theirs is None or mine == theirs:
        return True
    if mine is None:  # the model and the clients never import the daemon (tests above)
        return True
    rest = imported.split(".", 2)[2]
    return any(rest == a or rest.startswith(a + ".") for a in MAY_IMPORT[mine])


def test_the_daemons_folders_import_only_downwards() -> None:
    wrong = sorted(
        f"{m} -> {i}" for m in MODULES if folder(m) for i in GRAPH[m] if not allowed(m, i)
    )
    assert wrong == []


def test_only_the_wiring_makes_the_edges() -> None:
    """Everything else gets systemd, tmux and the scope runner as ports (host/ports.py)."""
    makers = sorted(
        f"{m} imports {c.rsplit('.', 1)[1]}"
        for m, p in MODULES.items()
        if m not in WIRING and not m.startswith("hostagent.daemon.host.")
        for c in imports(p) & EDGE_CLASSES
    )
    assert makers == []


def wirings(path: Path) -> list[int]:
    """Lines that wire collaborators together: a listener added to a registry, another
    object's attribute set to a function (a lambda, or a method: `x.on_y = z.method`), the
    module-wide journal fields set."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            listeners = isinstance(owner, ast.Attribute) and owner.attr == "listeners"
            if (listeners and name in ("append", "extend")) or name == "set_session_fields":
                found.append(node.lineno)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
            if node.target.attr == "listeners":
                found.append(node.lineno)
        elif isinstance(node, ast.Assign):
            pairs = [
                pair
                for target in node.targets
                for pair in (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
            ]
            if any(
                isinstance(value, ast.Lambda | ast.Attribute)
                and isinstance(t, ast.Attribute)
                and not (isinstance(t.value, ast.Name) and t.value.id == "self")
                for t, value in pairs
            ):
                found.append(node.lineno)
    return sorted(found)


def test_conversations_keep_ids_and_the_hooks_are_apart() -> None:
    """follow/conversations/conversation.py keeps ids; the hooks file, the FIFO and their dispatch are
    follow/hooks/agenthooks.py's, which hands ids over."""
    hooks_side = {
        "hostagent.daemon.follow.hooks.hookpipe",
        "hostagent.daemon.follow.hooks.hookflow",
        "hostagent.daemon.follow.hooks.formats",
        "hostagent.daemon.follow.hooks.agenthooks",
    }
    assert GRAPH["hostagent.daemon.follow.conversations.conversation"] & hooks_side == set()


def test_only_the_core_and_the_server_wire_collaborators() -> None:
    """Who listens to whom and who calls back whom is said in core.py (and, for the process's
    own edges, server.py): nowhere else does a part make another call it."""
    wired = sorted(
        f"{m}:{line}"
        for m, p in MODULES.items()
        if m.startswith("hostagent.daemon") and m not in WIRING
        for line in wirings(p)
    )
    assert wired == []


def late_callbacks(path: Path) -> list[int]:
    """Lines where a part gives itself a callback that calls into nothing until someone sets
    it (`self.on_x = lambda ...: None` in a method), or where a part is handed a callback
    after it is made (an attribute of another object set to a function, not a listener)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if isinstance(node.value, ast.Lambda) and any(
            isinstance(t, ast.Attribute) for t in targets
        ):
            found.append(node.lineno)
    return found


def test_no_part_is_given_a_callback_after_it_is_made() -> None:
    """A part's callbacks are constructor arguments, none with a default (core.py): a
    missing one is a TypeError when the daemon is assembled, never a call into nothing. The
    one left is the store's: it is made before the registry it is read into."""
    late = [
        f"{m}:{line}"
        for m, p in MODULES.items()
        if m.startswith("hostagent.daemon")
        for line in late_callbacks(p)
    ]
    assert late == []
    core = MODULES["hostagent.daemon.core"]
    assigned = [line for line in wirings(core) if "listeners" not in _line(core, line)]
    assert [_line(core, n).strip() for n in assigned] == ["store.holdings = registry.records"]


def _line(path: Path, number: int) -> str:
    return path.read_text().splitlines()[number - 1]


def test_what_is_done_as_the_owner_goes_through_its_port() -> None:
    """ops/, follow/ and bus/ get the owner port (host/ports.py OwnerPort), so the fast
    layer's fake stands in for every helper they run."""
    reaching = sorted(
        f"{m} imports {c.rsplit('.', 1)[1]}"
        for m, p in MODULES.items()
        if folder(m) in ("ops", "follow", "bus")
        for c in imports(p) & OWNER_RUNNERS
    )
    assert reaching == []


def edge_stand_ins(path: Path) -> list[int]:
    """Lines of a test that stand in for a host edge around its port: a monkeypatch of a host
    module's function (its limits, in capitals, may be lowered), or of the fakes' ports."""
    tree = ast.parse(path.read_text())
    host_modules = {
        (a.asname or a.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hostagent.daemon")
        for a in node.names
    }
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setattr"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "monkeypatch"
            and len(node.args) >= 2
        ):
            continue
        target, name = node.args[0], node.args[1]
        attr = name.value if isinstance(name, ast.Constant) else ""
        module = isinstance(target, ast.Name) and target.id in host_modules
        port = isinstance(target, ast.Attribute) and target.attr in ("scopes", "owners", "systemd")
        if (module and not str(attr).isupper()) or port:
            found.append(node.lineno)
    return found


def test_no_unit_test_stands_in_for_a_host_edge_around_its_port() -> None:
    """The fakes implement every port (tests/unit/fakes.py); a test scripts them."""
    stand_ins = sorted(
        f"{p.name}:{line}"
        for p in (ROOT / "tests" / "unit").glob("test_*.py")
        for line in edge_stand_ins(p)
    )
    assert stand_ins == []


def state_moves(path: Path) -> list[int]:
    """Lines that move a session through the state machine or end its run: a `change` call
    with an event, or a `finish` call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            event = node.args[1] if len(node.args) > 1 else None
            moves = node.func.attr == "change" and isinstance(event, ast.Attribute)
            if moves or node.func.attr == "finish":
                found.append(node.lineno)
    return found


def test_only_ops_moves_the_state_machine_and_ends_runs() -> None:
    """follow/ writes the fields it follows (a conversation id, a containment note) through
    change, but no state event; the lifecycle, reconcile, recovery and endings in ops/ do."""
    moves = sorted(
        f"{m}:{line}" for m, p in MODULES.items() if folder(m) != "ops" for line in state_moves(p)
    )
    assert moves == []


@pytest.mark.parametrize(
    ("importer", "imported", "ok"),
    [
        ("hostagent.daemon.state.registry", "hostagent.session", True),
        ("hostagent.daemon.state.registry", "hostagent.daemon.host.owner", False),
        ("hostagent.daemon.host.scope", "hostagent.daemon.state.paths", True),
        ("hostagent.daemon.host.scope", "hostagent.daemon.state.registry", False),
        ("hostagent.daemon.follow.terminal", "hostagent.daemon.ops.lifecycle", False),
        ("hostagent.daemon.ops.lifecycle", "hostagent.daemon.bus.auth", False),
        ("hostagent.daemon.bus.manager", "hostagent.daemon.ops.admission", True),
        ("hostagent.daemon.ops.lifecycle", "hostagent.daemon.core", False),
        ("hostagent.daemon.core", "hostagent.daemon.bus.manager", True),
    ],
)
def test_the_arrows_rule(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok


def test_the_rules_find_what_they_look_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio, os, subprocess\n"
        "session.record.state = 1\n"
        "record.a, record.b = 1, 2\n"
        "record.count += 1\n"
        "setattr(session.record, 'x', 1)\n"
        "other.x = 1\n"
        "subprocess.run(['true'])\n"
        "os.execvp('a', ['a'])\n"
        "asyncio.create_subprocess_exec('a')\n"
    )
    assert sorted(record_writes(sample)) == [2, 3, 3, 4, 5]
    assert process_starts(sample) == [7, 8, 9]
    moves = tmp_path / "moves.py"
    moves.write_text(
        "registry.change(session, Event.STOP)\n"
        "registry.change(session, containment='x')\n"
        "await endings.finish(session)\n"
    )
    assert state_moves(moves) == [1, 3]
    runtime = tmp_path / "runtime.py"
    runtime.write_text(
        "session.watch = None\n"
        "s.pane_pid, s.unfollow = 1, None\n"
        "session.waiters.add(w)\n"
        "self.watch = None\n"
    )
    assert sorted(runtime_writes(runtime)) == [1, 2, 2, 3]
    wiring = tmp_path / "wiring.py"
    wiring.write_text(
        "registry.listeners.append(x)\n"
        "self.registry.listeners += [x]\n"
        "conversations.on_pane_died = endings.agent_exited_soon\n"
        "store.holdings = lambda: []\n"
        "a.x, a.y = b.f, b.g\n"
        "self.after_end = conversations.after_end\n"
        "session.owner = owner\n"
        "set_session_fields(f)\n"
    )
    assert wirings(wiring) == [1, 2, 3, 4, 5, 8]
    late = tmp_path / "late.py"
    late.write_text(
        "self.on_x: Callable[[], None] = lambda: None\n"
        "self.on_y = lambda s: None\n"
        "self.on_z = on_z\n"
        "f = lambda: None\n"
    )
    assert late_callbacks(late) == [1, 2]
    stand_ins = tmp_path / "stand_ins.py"
    stand_ins.write_text(
        "from hostagent.daemon.host import owner as owner_module\n"
        "monkeypatch.setattr(owner_module, 'run_as_owner', f)\n"
        "monkeypatch.setattr(owner_module, 'MAX_OUTPUT', 10)\n"
        "monkeypatch.setattr(host.scopes, 'stop', f)\n"
        "monkeypatch.setattr(host.store, 'save', f)\n"
    )
    assert edge_stand_ins(stand_ins) == [2, 4]
    saves = tmp_path / "saves.py"
    saves.write_text("self.registry.store.save(record)\nstore.save(r)\nconfig.save()\n")
    assert store_writes(saves) == [1, 2]


def test_every_module_is_in_the_architecture_table() -> None:
    """docs/architecture.md names each module by its path, so a newcomer finds its role."""
    table = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and f"`{p.relative_to(PACKAGE)}`" not in table
    )
    assert unnamed == []


def test_the_code_is_formatted_not_squeezed() -> None:
    """ruff format's layout everywhere (dev/test checks it): no line or block kept out of it
    to save lines, in the package, its tests, the bench or dev/."""
    markers = ("fmt" + ": skip", "fmt" + ": off")  # spelled apart, so this file holds neither
    squeezed = sorted(
        str(p.relative_to(ROOT))
        for folder in ("hostagent", "tests", "bench", "dev")
        for p in (ROOT / folder).rglob("*.py")
        if any(m in p.read_text(encoding="utf-8") for m in markers)
    )
    assert squeezed == []


def test_a_module_that_drives_real_clis_is_in_their_lane() -> None:
    """dev/test runs the real agent CLIs in a lane of their own, chosen by the real_cli
    marker: a module that drives them and lacks it would run them in the other lane too."""
    drivers = (
        "from tests.integration.real_agents import",
        "from tests.integration.test_real_agents import",
    )
    unmarked = sorted(
        p.name
        for p in (ROOT / "tests" / "integration").glob("test_*.py")
        if any(d in (text := p.read_text(encoding="utf-8")) for d in drivers)
        and "pytest.mark.real_cli" not in text
    )
    assert unmarked == []
