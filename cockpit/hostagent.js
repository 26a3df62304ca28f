/*
 * hostagent's Cockpit page. It talks to the daemon's D-Bus API (org.hostagent.HostAgent1 on the
 * system bus) through Cockpit's bridge, as the logged-in user: the daemon and polkit decide what
 * that user may do, exactly as for hostagentctl, and an admin with Cockpit's administrative
 * access on acts as root. The list follows SessionNew, SessionRemoved and PropertiesChanged;
 * memory is read every few seconds, since systemd does not signal it.
 */
"use strict";

const BUS = "org.hostagent.HostAgent1";
const ROOT = "/org/hostagent/HostAgent1";
const MANAGER = BUS + ".Manager";
const SESSION = BUS + ".Session";
const PROPERTIES = "org.freedesktop.DBus.Properties";
// systemd's "not known" is 2^64-1, which the bridge's JSON carries as -1.
const unknown = value => value === undefined || value === null || value < 0 || value >= 2 ** 63;
const COUNTERS_MS = 5000;
// Calls that act on a session may ask polkit, which may ask the user: Cockpit's session
// answers polkit's questions with the login's own credentials.
const INTERACTIVE = { flags: "i" };

const client = cockpit.dbus(BUS, { bus: "system", superuser: "try" });
const sessions = new Map(); // name -> properties
const users = new Map(); // uid -> user name
let terminal = null; // { term, channel, name, live } while a session's screen is shown
let me = null; // the logged-in user: cockpit.user()'s { id, name, groups }
// Cockpit's administrative access: on, the page's calls run as root.
const administrative = cockpit.permission({ admin: true });

const $ = id => document.getElementById(id);

function unwrap(variants) {
    const out = {};
    for (const [key, variant] of Object.entries(variants))
        out[key] = variant.v;
    return out;
}

function showError(ex) {
    $("alert-text").textContent = ex.message || String(ex);
    $("alert").hidden = false;
}

function human(value, kind) {
    if (unknown(value))
        return "-";
    if (kind === "bytes")
        return cockpit.format_bytes(value);
    const s = Math.floor(value);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d";
}

// Tokens and cost as hostagentctl writes them: 12.3k (cut, never rounded up), $0.42; "-" for
// what is not known.
function tokens(n) {
    for (const [unit, size] of [["M", 1e6], ["k", 1e3]]) {
        const tenths = Math.floor(n * 10 / size);
        if (n >= size)
            return (tenths < 1000 ? (tenths / 10).toFixed(1) : String(Math.floor(tenths / 10))) + unit;
    }
    return String(n);
}

function dollars(cost) {
    if (cost === undefined || cost === null)
        return "-";
    return "$" + (cost > 0 && cost < 0.01 ? cost.toFixed(4) : cost.toFixed(2));
}

function usageCells(props) {
    const used = props.Usage ? unwrap(props.Usage) : null;
    if (!used || !(used.calls || used.input || used.output))
        return ["-", used ? dollars(used.cost_usd) : "-"];
    return [tokens(used.input + used.output), dollars(used.cost_usd)];
}

function age(props) {
    if (props.State !== "running" || !props.StartedAt)
        return "-";
    return human(Date.now() / 1000 - props.StartedAt / 1e6);
}

async function readSession(name, path) {
    const [props] = await client.call(path, PROPERTIES, "GetAll", [SESSION]);
    sessions.set(name, { ...unwrap(props), path });
}

async function loadUsers() {
    const passwd = await cockpit.file("/etc/passwd").read();
    for (const line of (passwd || "").split("\n")) {
        const fields = line.split(":");
        if (fields.length > 2)
            users.set(Number(fields[2]), fields[0]);
    }
}

async function loadAll() {
    const [rows] = await client.call(ROOT, MANAGER, "ListSessions", []);
    sessions.clear();
    await Promise.all(rows.map(([name, , , , , path]) => readSession(name, path)));
    const [version] = await client.call(ROOT, PROPERTIES, "Get", [MANAGER, "Version"]);
    $("daemon").textContent = "hostagent " + version.v;
    render();
}

function render() {
    const body = $("sessions").tBodies[0];
    body.replaceChildren();
    const names = [...sessions.keys()].sort();
    for (const name of names) {
        const p = sessions.get(name);
        const row = body.insertRow();
        row.dataset.name = name;
        row.className = "activity-" + p.Activity + " state-" + p.State;
        const cells = [name, users.get(p.Owner) || String(p.Owner), p.Preset, p.State, p.Activity,
            age(p), human(p.MemoryCurrent, "bytes"), ...usageCells(p), p.Branch || "-"];
        for (const text of cells)
            row.insertCell().textContent = text;
        row.addEventListener("click", () => cockpit.location.go(["session", name]));
    }
    $("empty").hidden = names.length > 0;
    const shown = cockpit.location.path[0] === "session" && sessions.get(cockpit.location.path[1]);
    if (shown)
        renderSession(cockpit.location.path[1]);
}

/* ---- the inbox: every question an agent waits on that this user may answer ------------- */

let inboxReading = null; // the ListQuestions under way, and whether another is wanted after it

function refreshInbox() {
    if (inboxReading) {
        inboxReading.again = true;
        return;
    }
    inboxReading = { again: false };
    client.call(ROOT, MANAGER, "ListQuestions", [])
            .then(([questions]) => renderInbox(questions), showError)
            .finally(() => {
                const again = inboxReading.again;
                inboxReading = null;
                if (again)
                    refreshInbox();
            });
}

function renderInbox(questions) {
    const list = $("questions");
    list.replaceChildren();
    for (const [name, variants] of questions) {
        const q = unwrap(variants);
        const item = document.createElement("div");
        item.className = "question";
        item.dataset.name = name;
        const head = document.createElement("p");
        const link = Object.assign(document.createElement("a"),
                                   { textContent: name, href: "#/session/" + name });
        head.append(link, document.createTextNode(": " + (q.text || "asks you to choose")));
        item.append(head);
        if (q.detail)
            item.append(Object.assign(document.createElement("pre"), { textContent: q.detail }));
        (q.choices || []).forEach((label, i) => {
            const number = (q.numbers || [])[i] || i + 1;
            const button = Object.assign(document.createElement("button"),
                                         { textContent: number + ". " + label });
            if (i === q.selected)
                button.className = "primary";
            button.addEventListener("click", () => answer(name, q.id, String(number), item));
            item.append(button);
        });
        list.append(item);
    }
    $("inbox").hidden = questions.length === 0;
}

function answer(name, id, choice, item) {
    const p = sessions.get(name);
    if (!p)
        return;
    for (const button of item.querySelectorAll("button"))
        button.disabled = true;
    client.call(p.path, SESSION, "Answer", [id, choice], INTERACTIVE)
            .catch(showError)
            .finally(refreshInbox);
}

/* ---- one session ------------------------------------------------------------------------ */

function renderSession(name) {
    const p = sessions.get(name);
    if (!p)
        return;
    $("session-name").textContent = name;
    $("session-state").textContent = p.State + " · " + p.Activity;
    $("session-state").className = "badge activity-" + p.Activity;
    const shown = {
        Owner: users.get(p.Owner) || p.Owner, Agent: p.Preset, Directory: p.Cwd,
        Worktree: p.Worktree || "-", Branch: p.Branch || "-", Unit: p.Unit,
        Command: (p.Command || []).join(" "), Conversation: p.AgentSessionId || "-",
        Sandbox: sandboxWords(p).join(" ") || "none", Profile: profileShown(p),
        "Made from": p.Parent || "-",
        Age: age(p), Memory: human(p.MemoryCurrent, "bytes"),
        "CPU time": unknown(p.CPUUsageNSec) ? "-" : human(p.CPUUsageNSec / 1e9),
        Tokens: usageCells(p)[0], Cost: usageCells(p)[1],
        "Dormant because": p.DormantReason || "-",
        Resumes: p.ResumeCount, Result: p.Result || "-", "Last error": p.LastError || "-",
    };
    const list = $("props");
    list.replaceChildren();
    for (const [key, value] of Object.entries(shown)) {
        list.append(Object.assign(document.createElement("dt"), { textContent: key }));
        list.append(Object.assign(document.createElement("dd"), { textContent: String(value) }));
    }
    const running = p.State === "running";
    // What the daemon would refuse is not offered (as Cockpit's own pages do), rather than
    // refused after a confirmation; nothing reads what is sent to a session that ended.
    const acts = mayAct(p);
    $("stop").disabled = !acts || !running;
    $("resume").disabled = !acts || running;
    $("kill").disabled = $("remove").disabled = !acts;
    $("send-text").disabled = !acts || !running;
    document.querySelector("#send-form button").disabled = !acts || !running;
    $("not-yours").hidden = acts;
    $("not-yours").textContent = acts ? "" : "This is " + (users.get(p.Owner) || p.Owner) +
        "'s session: you may look at it, not act on it. An administrator acts on it with " +
        "administrative access turned on.";
    // The live screen while it runs, its last screen once it ended, and live again on resume.
    if (terminal && terminal.name === name)
        showScreen(name, p);
}

/* What the session is confined to: its sandboxing words, as systemd writes them. */
const SANDBOX_WORDS = ["ProtectSystem", "ProtectHome", "ReadWritePaths", "ReadOnlyPaths",
    "InaccessiblePaths", "PrivateTmp", "NoNewPrivileges"];
function sandboxWords(p) {
    return (p.Properties || []).filter(w => SANDBOX_WORDS.includes(w.split("=")[0]));
}

/* The profile the session started from, and the words by which it asked for less. */
function profileShown(p) {
    if (!p.Profile)
        return "none";
    const less = p.Loosened || [];
    return less.length ? p.Profile + ", less: " + less.join(" ") : p.Profile;
}

/* Who may act on a session, as the daemon and polkit decide: its owner, root (which
 * administrative access makes the page's calls), and the hostagent-admin group. */
function mayAct(p) {
    if (!me)
        return false;
    return p.Owner === me.id || me.id === 0 || administrative.allowed === true ||
        (me.groups || []).includes("hostagent-admin");
}

// The states in which a session's last screen is kept (the daemon saves it as the run ends).
const ENDED = ["stopped", "failed", "dormant"];

function showScreen(name, p) {
    const shown = terminal && terminal.name === name ? terminal : null;
    if (!mayAct(p)) {
        // Not hers to see: nothing drawn that the daemon would then refuse.
        if (!shown?.hidden)
            showNoScreen(name, p);
        return;
    }
    if ((p.State === "running" || p.State === "starting") && !shown?.live)
        openTerminal(name, p.path);
    else if (ENDED.includes(p.State) && shown?.endedAs !== p.State)
        showLastScreen(name, p.path, p.State);
    // stopping: what is shown stays until the run has ended
}

async function showSession(name) {
    const p = sessions.get(name);
    $("list-view").hidden = true;
    $("session-view").hidden = false;
    $("confirm").hidden = true;
    if (!p) {
        $("session-name").textContent = name;
        $("session-state").textContent = "no such session";
        return;
    }
    renderSession(name);
    explain(name);
    cockpit.spawn(["journalctl", "--no-pager", "-o", "short-iso", "-n", "50", "-u", "hostagent",
        "HOSTAGENT_SESSION=" + name], { superuser: "try", err: "message" })
        .then(out => {
            $("journal").textContent = out.startsWith("-- No entries")
                ? "No journal lines about this session that you may read (the system journal " +
                  "needs the adm or systemd-journal group, or administrative access)."
                : out;
        })
        .catch(ex => { $("journal").textContent = "The journal cannot be read: " + ex.message });
    if (!terminal || terminal.name !== name)
        showScreen(name, p);
}

function explain(name) {
    const p = sessions.get(name);
    client.call(p.path, SESSION, "ExplainActivity", []).then(([why]) => {
        const list = $("explain");
        list.replaceChildren();
        for (const [key, value] of Object.entries(why)) {
            list.append(Object.assign(document.createElement("dt"), { textContent: key }));
            list.append(Object.assign(document.createElement("dd"), { textContent: value }));
        }
    }, showError);
}

function closeTerminal() {
    if (terminal) {
        terminal.channel?.close();
        terminal.term?.dispose();
        terminal = null;
    }
    $("terminal").hidden = false;
}

function showNoScreen(name, p) {
    closeTerminal();
    $("terminal").replaceChildren();
    $("terminal").hidden = true;
    terminal = { term: null, channel: null, name, live: false, hidden: true };
    $("terminal-note").textContent = "Only " + (users.get(p.Owner) || p.Owner) +
        " and administrators see this session's screen.";
    $("terminal-note").hidden = false;
}

/* The last screen the agent of an ended session drew, as capture shows it: read-only. */
async function showLastScreen(name, path, state) {
    closeTerminal();
    const term = new Terminal({ cols: 120, rows: 30, convertEol: true, fontSize: 13,
                                disableStdin: true });
    terminal = { term, channel: null, name, live: false, endedAs: state };
    $("terminal").replaceChildren();
    term.open($("terminal"));
    try {
        const [text] = await client.call(path, SESSION, "Capture", [0]);
        if (!terminal || terminal.term !== term)
            return; // another screen was opened meanwhile
        term.write(text);
        $("terminal-note").textContent = "The session has ended: this is the last screen its " +
            "agent drew. Resume it to go on.";
    } catch (ex) {
        $("terminal-note").textContent = "The last screen is not available: " + ex.message;
    }
    $("terminal-note").hidden = false;
}

async function openTerminal(name, path) {
    closeTerminal();
    const term = new Terminal({ cols: 120, rows: 30, convertEol: false, fontSize: 13 });
    terminal = { term, channel: null, name, live: true };
    $("terminal").replaceChildren();
    term.open($("terminal"));
    $("terminal-note").hidden = true;
    let argv;
    try {
        [argv] = await client.call(path, SESSION, "GetAttachCommand", []);
    } catch (ex) {
        $("terminal-note").textContent = "The live screen is not available: " + ex.message;
        $("terminal-note").hidden = false;
        return;
    }
    if (!terminal || terminal.term !== term)
        return; // another session was opened meanwhile
    const channel = cockpit.channel({
        payload: "stream", spawn: argv, pty: true, environ: ["TERM=xterm-256color"],
        window: { rows: term.rows, cols: term.cols },
    });
    terminal.channel = channel;
    channel.addEventListener("message", (event, data) => term.write(data));
    channel.addEventListener("close", (event, options) => {
        if (options.problem)
            term.write("\r\n[" + options.problem + "]\r\n");
    });
    term.onData(data => channel.send(data));
}

function act(method, args) {
    const name = cockpit.location.path[1];
    const p = sessions.get(name);
    if (!p)
        return;
    client.call(p.path, SESSION, method, args || [], INTERACTIVE).then(() => {
        // A resumed session's screen comes back live with its state (renderSession).
        if (method === "Remove")
            cockpit.location.go([]);
    }, showError);
}

function confirmThen(button, method, args) {
    const name = cockpit.location.path[1];
    $("confirm-text").textContent = button.dataset.confirm + " session " + name + "?";
    $("confirm-yes").textContent = button.dataset.confirm;
    $("confirm-yes").onclick = () => { $("confirm").hidden = true; act(method, args) };
    $("confirm").hidden = false;
}

/* ---- a new session ------------------------------------------------------------------------ */

function seconds(text) {
    // systemd's time spans, as RuntimeMaxSec= and hostagentctl -p take them: 90, 30min, 1h 30min.
    const units = { "": 1, s: 1, sec: 1, m: 60, min: 60, h: 3600, hr: 3600, d: 86400, w: 604800 };
    let total = 0;
    const parts = text.trim().match(/\d+(?:\.\d+)?\s*[a-z]*/gi);
    if (!parts || parts.join("").replace(/\s/g, "") !== text.replace(/\s/g, ""))
        throw new Error("'" + text + "' is not a time span; write it as systemd does: 30min, 8h.");
    for (const part of parts) {
        const [, number, unit] = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(part);
        if (!(unit.toLowerCase() in units))
            throw new Error("'" + text + "' is not a time span; write it as systemd does: 30min, 8h.");
        total += Number(number) * units[unit.toLowerCase()];
    }
    return Math.round(total);
}

function bytes(text) {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$/i.exec(text);
    if (!m)
        throw new Error("'" + text + "' is not a size; use a number with K, M, G or T.");
    return Math.round(Number(m[1]) * 1024 ** " KMGT".indexOf((m[2] || " ").toUpperCase()));
}

async function openNewForm() {
    // Only agents whose program this user has: the others would fail at once. The daemon
    // looks as hostagentctl presets does (the user's login shell, then hostagent's own
    // helpers); an empty command is the user's login shell.
    const [[presets], [agents]] = await Promise.all([
        client.call(ROOT, MANAGER, "ListPresets", []),
        client.call(ROOT, MANAGER, "ListAgents", []),
    ]);
    const found = new Map(agents.map(([name, program]) => [name, program]));
    const installed = presets
        .filter(([name, , command]) => command.length === 0 || found.get(name))
        .map(([name]) => name);
    const select = $("new-preset");
    select.replaceChildren();
    for (const name of installed)
        select.append(new Option(name, name, name === "shell", name === "shell"));
    $("new-form").hidden = false;
}

async function createSession(event) {
    event.preventDefault();
    const options = {};
    try {
        if ($("new-memory").value)
            options.memory_max = { t: "t", v: bytes($("new-memory").value) };
        if ($("new-tasks").value)
            options.tasks_max = { t: "t", v: Number($("new-tasks").value) };
        if ($("new-runtime").value)
            options.runtime_max_sec = { t: "t", v: seconds($("new-runtime").value) };
        if ($("new-worktree").checked)
            options.worktree = { t: "s", v: "" };
        const cwd = $("new-cwd").value || (await cockpit.user()).home;
        const [path] = await client.call(ROOT, MANAGER, "CreateSession",
            [$("new-name").value, $("new-preset").value, cwd, options], INTERACTIVE);
        $("new-form").hidden = true;
        $("new-form").reset();
        const [name] = await client.call(path, PROPERTIES, "Get", [SESSION, "Name"]);
        cockpit.location.go(["session", name.v]);
    } catch (ex) {
        showError(ex);
    }
}

/* ---- wiring ------------------------------------------------------------------------------ */

function navigate() {
    const path = cockpit.location.path;
    if (path[0] === "session" && path[1]) {
        showSession(path[1]);
    } else {
        closeTerminal();
        $("session-view").hidden = true;
        $("list-view").hidden = false;
    }
}

function followBus() {
    client.subscribe({ interface: MANAGER, path: ROOT }, (path, iface, signal, args) => {
        const [name, object] = args;
        if (signal === "SessionNew")
            readSession(name, object).then(render, showError);
        else if (signal === "SessionRemoved") {
            sessions.delete(name);
            render();
            refreshInbox();
        }
    });
    client.subscribe({ interface: PROPERTIES, member: "PropertiesChanged", path_namespace: ROOT },
        (path, iface, signal, [changedIface, changed]) => {
            if (changedIface !== SESSION)
                return;
            for (const [name, p] of sessions) {
                if (p.path !== path)
                    continue;
                Object.assign(p, unwrap(changed));
                // The reasons change with the activity: read them again for the session shown.
                if ("Activity" in changed && cockpit.location.path[1] === name)
                    explain(name);
            }
            if ("Question" in changed)
                refreshInbox();
            render();
        });
    // A daemon that restarts or is upgraded comes back under a new owner: read it all again.
    client.addEventListener("owner", (event, owner) => {
        if (owner) {
            loadAll().catch(showError);
            refreshInbox();
        }
        else
            $("daemon").textContent = "hostagent is not running";
    });
}

function refreshCounters() {
    const reads = [];
    for (const p of sessions.values())
        if (p.State === "running")
            for (const counter of ["MemoryCurrent", "CPUUsageNSec"])
                reads.push(client.call(p.path, PROPERTIES, "Get", [SESSION, counter])
                    .then(([value]) => { p[counter] = value.v }, () => {}));
    Promise.all(reads).then(render);
}

document.addEventListener("DOMContentLoaded", () => {
    $("alert-close").addEventListener("click", () => { $("alert").hidden = true });
    $("new-button").addEventListener("click", () => openNewForm().catch(showError));
    $("new-cancel").addEventListener("click", () => { $("new-form").hidden = true });
    $("new-form").addEventListener("submit", createSession);
    $("stop").addEventListener("click", event => confirmThen(event.target, "Stop"));
    $("kill").addEventListener("click", event => confirmThen(event.target, "Kill", ["all", 15]));
    $("remove").addEventListener("click", event => confirmThen(event.target, "Remove"));
    $("resume").addEventListener("click", () => act("Resume"));
    $("confirm-no").addEventListener("click", () => { $("confirm").hidden = true });
    $("send-form").addEventListener("submit", event => {
        event.preventDefault();
        act("SendText", [$("send-text").value, true]);
        $("send-text").value = "";
    });
    cockpit.addEventListener("locationchanged", navigate);
    administrative.addEventListener("changed", render);
    followBus();
    cockpit.user().then(user => { me = user }).catch(() => {})
        .then(loadUsers).catch(() => {}).then(loadAll).then(navigate).then(refreshInbox)
        .catch(showError)
        .finally(() => { document.body.dataset.ready = "yes" });
    window.setInterval(refreshCounters, COUNTERS_MS);
});
