// Drives an MCP server over stdio with the official TypeScript client
// (@modelcontextprotocol/sdk), as a host builder's code would.
//
//   node driver.mjs PLAN -- COMMAND [ARG...]
//
// PLAN is JSON: {"tool": "bash", "calls": [{"command": "...", "repeat": N}]}.
// Every call carries a progress handler (so a progress token); one JSON line
// per call goes to stdout: the notifications the handler saw, their messages
// concatenated, what the result says was sent, the result's text, whether it
// is an error, and the call's milliseconds.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const dash = process.argv.indexOf("--");
const plan = JSON.parse(process.argv[2]);
const [command, ...args] = process.argv.slice(dash + 1);
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
const client = new Client({ name: "kigi-ts-driver", version: "1.0.0" });
await client.connect(transport);
for (const call of plan.calls) {
  for (let i = 0; i < (call.repeat ?? 1); i++) {
    let notes = 0;
    let text = "";
    const started = performance.now();
    const result = await client.callTool(
      { name: plan.tool ?? "bash", arguments: { command: call.command } },
      undefined,
      {
        onprogress: (progress) => {
          notes += 1;
          text += progress.message ?? "";
        },
      },
    );
    const ms = performance.now() - started;
    const stream = (result._meta ?? {})["dev.kigi/stream"] ?? {};
    console.log(
      JSON.stringify({
        notes,
        text,
        sent: stream.frames_sent ?? null,
        result: result.content.map((c) => c.text ?? "").join(""),
        isError: result.isError ?? false,
        ms,
      }),
    );
  }
}
await client.close();
