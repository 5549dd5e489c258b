// Drives pcpd's MCP face with the official TypeScript SDK client, over
// stdio (pcpctl mcp) or streamable HTTP:
//
//   node interop.mjs [--desktop] stdio PCPCTL MCP_SOCKET
//   node interop.mjs [--desktop] http URL TOKEN
//
// It prints one JSON line per step ({"step", ...}) for the Go test to
// check. A call waiting for the user prints "waiting" at its first
// progress notification; the test then approves the first confirmation
// and denies the second, as the user would once the prompt is shown.
//
// Without --desktop it drives the daemon test's notes app
// (internal/daemon/mcp_node_test.go). With --desktop it runs the
// end-to-end scenario of internal/e2e/mcp_test.go: the real notes app
// (org.pcp.notes) and gnome-calculator on a headless desktop, where it
// finds the calculator's window and keys itself, from pcp_search and
// pcp_elements, as an agent would.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const argv = process.argv.slice(2);
const desktop = argv[0] === "--desktop";
if (desktop) argv.shift();
const [mode, a, b] = argv;
const out = (step, v) => process.stdout.write(JSON.stringify({ step, ...v }) + "\n");

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({ command: a, args: ["mcp", "--mcp-socket", b], stderr: "inherit" });
} else if (mode === "http") {
  transport = new StreamableHTTPClientTransport(new URL(a), { requestInit: { headers: { Authorization: `Bearer ${b}` } } });
} else {
  console.error("usage: node interop.mjs [--desktop] stdio PCPCTL MCP_SOCKET | http URL TOKEN");
  process.exit(2);
}

const client = new Client({ name: "pcp-interop", version: "1.0.0" });
await client.connect(transport);
out("initialize", { server: client.getServerVersion() });

const { tools } = await client.listTools();
out("tools", { names: tools.map((t) => t.name) });

const tool = (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);
const call = async (step, name, args, opts) => {
  const res = await tool(name, args, opts);
  out(step, { isError: !!res.isError, structured: res.structuredContent ?? null });
  return res;
};
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

if (!desktop) {
  await call("search", "pcp_search", { query: "note create" });
  await call("create", "pcp_invoke", { capability_id: "org.example.notes.create", params: { title: "groceries" } });
  await call("approved", "pcp_invoke", { capability_id: "org.example.notes.delete", params: { note_id: "n-1" } }, waiting());
  await call("denied", "pcp_invoke", { capability_id: "org.example.notes.delete", params: { note_id: "n-2" } }, waiting());
} else {
  await call("search", "pcp_search", { query: "note create" });
  // The accessible apps and their windows.
  const apps = await call("apps", "pcp_search", { query: "calculator widget factory" });
  const calc = (apps.structuredContent?.tier2_apps ?? []).find((x) => x.app_id.endsWith("calculator"));
  if (!calc) throw new Error("pcp_search lists no calculator window");
  const surface = calc.surfaces[0];

  // Two notes: the first is deleted with the user's approval, the
  // second survives the user's deny.
  const created = async (step, title) => {
    const res = await call(step, "pcp_invoke", { capability_id: "org.pcp.notes.create", params: { title, body: `from ${mode}` } });
    return res.structuredContent.data.id;
  };
  const gone = await created("create", `groceries (${mode})`);
  const kept = await created("create_kept", `kept (${mode})`);
  await call("approved", "pcp_invoke", { capability_id: "org.pcp.notes.delete", params: { id: gone } }, waiting());
  await call("denied", "pcp_invoke", { capability_id: "org.pcp.notes.delete", params: { id: kept } }, waiting());

  // The calculator's keys, read from the compact tree: one element a
  // line, `push button "2 2" [ID] ...` (GTK 4 labels a key with its name
  // and description).
  const tree = async () => (await tool("pcp_elements", { surface_id: surface, max_depth: 64 })).structuredContent.tree;
  const keys = {};
  for (const line of (await tree()).split("\n")) {
    const m = line.match(/^\s*push button "([^" ]+)[^"]*" \[([^\]]+)\]/);
    if (m && !(m[1] in keys)) keys[m[1]] = m[2];
  }
  const pressed = [];
  for (const key of ["2", "+", "3", "="]) {
    if (!keys[key]) throw new Error(`no key ${key} in the calculator's tree`);
    const res = await tool("pcp_act", { surface_id: surface, element_id: keys[key], action: "activate" });
    if (res.isError) throw new Error(`pressing ${key}: ${JSON.stringify(res.structuredContent)}`);
    pressed.push(key);
  }
  out("pressed", { surface, keys: pressed });
  // The display, read back until it shows the result (the calculator
  // updates it after the last press returns); between reads the client
  // waits with pcp_events for the next change of the calculator's
  // elements, bounded, so a change between a read and the wait costs one
  // wait, never the answer.
  let texts = [];
  for (const end = Date.now() + 10000; ; ) {
    texts = [...(await tree()).matchAll(/^\s*text\b.* value="(.*)"$/gm)].map((m) => m[1].trim());
    if (texts.some((t) => t.trim() === "5") || Date.now() > end) break;
    await tool("pcp_events", {
      types: ["element.value_changed", "element.children_changed", "element.state_changed"],
      surface_id: surface,
      wait_ms: 2000,
    });
  }
  out("display", { texts });
}
await client.close();
out("done", {});
