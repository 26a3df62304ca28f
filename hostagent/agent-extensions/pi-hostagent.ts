// hostagent's extension for Pi: tells the hostagent session Pi runs in what Pi is doing.
//
// The built-in preset `pi` starts Pi with `-e` and this file. Each event below runs
// `hostagentctl hook EVENT` with the event's JSON on stdin, as any CLI's hook does; the
// session's secret (HOSTAGENT_HOOK_TOKEN) is in Pi's environment, and outside a hostagent
// session the extension does nothing. The preset's hooks.activity table says what each event
// means (docs/presets.md, "A CLI's own hooks"). A report that fails is dropped: Pi never waits
// on hostagent.
import { spawn } from "node:child_process";

const EVENTS = ["session_start", "agent_start", "agent_settled"];

export default function (pi: any) {
  if (!process.env.HOSTAGENT_HOOK_TOKEN) return;
  for (const event of EVENTS) {
    pi.on(event, async (_event: unknown, ctx: any) => {
      // The conversation's id (a /new or a fork starts another), as Pi's session file has it.
      const id = ctx?.sessionManager?.getSessionId?.() ?? "";
      try {
        const child = spawn("hostagentctl", ["hook", event], {
          stdio: ["pipe", "ignore", "ignore"],
        });
        child.on("error", () => {});
        child.stdin.on("error", () => {});
        child.stdin.end(JSON.stringify({ session_id: id, cwd: process.cwd() }));
      } catch {
        // no hostagentctl here: the screen still says what Pi does
      }
    });
  }
}
