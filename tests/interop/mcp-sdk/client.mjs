// An independent MCP client: the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json) on streamable HTTP, driven by tests/test_clients_ts.py.
//
// usage: node client.mjs '<plan JSON>'
//   plan = {"url": ".../mcp", "headers": {...}, "calls": [{"name": "...", "arguments": {...}}, ...]}
// prints one JSON object: negotiated protocol revision, server info, listed tools, and each call's
// result (content, structuredContent, isError) in order. Exit code 0 unless the SDK itself failed.
// A call with "options" (the SDK's request options: timeout, resetTimeoutOnProgress) also records the
// progress notifications it got and how long it took, and an error instead of failing.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const plan = JSON.parse(process.argv[2]);
const sdkVersion = JSON.parse(
  readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url)),
).version;

const transport = new StreamableHTTPClientTransport(new URL(plan.url), {
  requestInit: { headers: plan.headers ?? {} },
});
const client = new Client({ name: "gym-mcp-bridge-interop-ts", version: "0.0.0" });
await client.connect(transport);

const out = {
  sdk_version: sdkVersion,
  sdk_latest_protocol_version: LATEST_PROTOCOL_VERSION,
  protocol_version: transport.protocolVersion ?? null,
  server: client.getServerVersion() ?? null,
  tools: [],
  calls: [],
};
try {
  const listed = await client.listTools();
  out.tools = listed.tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema }));
} catch (err) {
  out.list_error = { code: err.code ?? null, message: String(err.message ?? err) };
}
for (const call of plan.calls ?? []) {
  if (call.options) {
    // options: {timeout, resetTimeoutOnProgress}; progress notifications are recorded with their
    // arrival time (ms since the call began), and an error is recorded instead of thrown
    const progress = [];
    const began = Date.now();
    try {
      const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} }, undefined, {
        ...call.options,
        onprogress: (p) => progress.push({ at_ms: Date.now() - began, ...p }),
      });
      out.calls.push({ name: call.name, ms: Date.now() - began, progress, structuredContent: result.structuredContent ?? null });
    } catch (err) {
      out.calls.push({ name: call.name, ms: Date.now() - began, progress, error: { code: err.code ?? null, message: String(err.message ?? err) } });
    }
    continue;
  }
  const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
  out.calls.push({
    name: call.name,
    isError: result.isError ?? false,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join(""),
    structuredContent: result.structuredContent ?? null,
  });
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
