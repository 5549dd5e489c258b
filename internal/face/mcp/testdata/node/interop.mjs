// Drives pcpd's MCP face with the official TypeScript SDK client, over
// stdio (pcpctl mcp) or streamable HTTP:
//
//   node interop.mjs stdio PCPCTL MCP_SOCKET
//   node interop.mjs http URL TOKEN
//
// It prints one JSON line per step ({"step", ...}) for the Go test
// (internal/daemon/mcp_node_test.go) to check. A call waiting for the
// user prints "waiting" at its first progress notification; the test
// then approves the first confirmation and denies the second, as the
// user would once the prompt is shown.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, a, b] = process.argv.slice(2);
const out = (step, v) => process.stdout.write(JSON.stringify({ step, ...v }) + "\n");

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({ command: a, args: ["mcp", "--mcp-socket", b], stderr: "inherit" });
} else if (mode === "http") {
  transport = new StreamableHTTPClientTransport(new URL(a), { requestInit: { headers: { Authorization: `Bearer ${b}` } } });
} else {
  console.error("usage: node interop.mjs stdio PCPCTL MCP_SOCKET | http URL TOKEN");
  process.exit(2);
}

const client = new Client({ name: "pcp-interop", version: "1.0.0" });
await client.connect(transport);
out("initialize", { server: client.getServerVersion() });

const { tools } = await client.listTools();
out("tools", { names: tools.map((t) => t.name) });

const call = async (step, name, args, opts) => {
  const res = await client.callTool({ name, arguments: args }, undefined, opts);
  out(step, { isError: !!res.isError, structured: res.structuredContent ?? null });
};
await call("search", "pcp_search", { query: "note create" });
await call("create", "pcp_invoke", { capability_id: "org.example.notes.create", params: { title: "groceries" } });
const waiting = () => {
  let seen = false;
  return {
    onprogress: (p) => {
      if (!seen) out("waiting", { message: p.message });
      seen = true;
    },
    timeout: 60000,
  };
};
await call("approved", "pcp_invoke", { capability_id: "org.example.notes.delete", params: { note_id: "n-1" } }, waiting());
await call("denied", "pcp_invoke", { capability_id: "org.example.notes.delete", params: { note_id: "n-2" } }, waiting());
await client.close();
out("done", {});
