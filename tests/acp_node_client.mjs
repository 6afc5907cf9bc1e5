// The editor side of an ACP test, on the TypeScript SDK's client: spawn the
// agent, declare the capabilities, send one prompt, print what came back.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [python, agentPath, capabilities, spec] = process.argv.slice(2);
const child = spawn(python, [agentPath], { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const updates = [];
const app = acp
  .client({ name: "kigi-test-editor" })
  .onNotification(acp.methods.client.session.update, (ctx) => {
    updates.push(ctx.params.update);
  });
const response = await app.connectWith(stream, async (agent) => {
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { _meta: JSON.parse(capabilities) },
  });
  const session = await agent.request(acp.methods.agent.session.new, {
    cwd: process.cwd(),
    mcpServers: [],
  });
  return agent.request(acp.methods.agent.session.prompt, {
    sessionId: session.sessionId,
    prompt: [{ type: "text", text: spec }],
  });
});
child.stdin.end();
process.stdout.write(JSON.stringify({ stopReason: response.stopReason, updates }) + "\n");
