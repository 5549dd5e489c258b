// A scomp client on Node's ws library: TestScompNodeClient runs it
// against a live pcpd. Usage:
//
//   node client.mjs tcp ws://127.0.0.1:PORT/ TOKEN
//   node client.mjs unix /path/to/scomp.sock
//
// It prints one line per check and exits non-zero on the first failure.
import WebSocket from "ws";

function fail(msg) {
  console.log("FAIL " + msg);
  process.exit(1);
}
function check(what, cond, got) {
  if (!cond) fail(`${what}: ${JSON.stringify(got)}`);
  console.log("ok " + what);
}

function open(url, headers) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ["scomp.v0"], { headers });
    const frames = [];
    const waiters = [];
    ws.on("message", (data, isBinary) => {
      const m = isBinary ? { binary: data } : JSON.parse(data.toString());
      const w = waiters.shift();
      w ? w.resolve(m) : frames.push(m);
    });
    ws.on("close", (code, reason) => {
      for (const w of waiters.splice(0)) w.resolve({ closed: code, reason: reason.toString() });
      frames.push({ closed: code, reason: reason.toString() });
    });
    ws.on("unexpected-response", (_req, res) => reject({ status: res.statusCode }));
    ws.on("error", reject);
    ws.on("open", () => {
      ws.next = () => (frames.length ? Promise.resolve(frames.shift()) : new Promise((resolve) => waiters.push({ resolve })));
      resolve(ws);
    });
  });
}

async function call(ws, id, method, params) {
  ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  const r = await ws.next();
  if (r.id !== id) fail(`reply to ${id}: ${JSON.stringify(r)}`);
  return r;
}

async function session(ws) {
  check("subprotocol", ws.protocol === "scomp.v0", ws.protocol);
  const notify = { name: "notify", input: { type: "object", properties: { message: { type: "string" } }, required: ["message"] }, output: { type: "string" } };
  let r = await call(ws, 1, "handshake", { protocol: "0.1", bindings: [notify, { name: "counter", output: { type: "object", properties: { $fn: { type: "string" } }, required: ["$fn"] } }, { name: "apply", input: { type: "object", properties: { f: { type: "object", properties: { $fn: { type: "string" } }, required: ["$fn"] } }, required: ["f"] } }], metadata: { client: { name: "node-ws" } } });
  check("handshake", r.result && r.result.sessionId && r.result.bindings.some((b) => b.name === "org_example_notes_create"), r);
  r = await call(ws, 2, "eval", { code: "1 + 1" });
  check("eval 1 + 1", r.result && r.result.value === 2, r);
  r = await call(ws, 3, "eval", { code: "const n = await org_example_notes_create({title: 'from node'}); n.data.title" });
  check("binding call", r.result && r.result.value === "from node", r);
  await reverse(ws);
  await references(ws);
  await clientReferences(ws);
  r = await call(ws, 6, "eval", { code: "await org_example_notes_create({title: 'seen'}); const ev = await nextEvent({types: ['capability.invoked']}); ev.data.capability_id" });
  check("nextEvent sees the eval's own call", r.result && r.result.value === "org.example.notes.create", r);
  ws.send(JSON.stringify([{ jsonrpc: "2.0", id: 4, method: "eval", params: { code: "1" } }]));
  r = await ws.next();
  check("batch refused", r.error && r.error.code === -32600, r);
  ws.send(Buffer.from('{"jsonrpc":"2.0","id":5,"method":"eval","params":{"code":"1"}}'), { binary: true });
  r = await ws.next();
  check("binary frame closes 1003", r.closed === 1003, r);
}

// reverse: an eval (id 1 again, the handshake being answered) calls the
// client's notify twice; the server's invokes are its ids 1 and 2. On
// invoke 1 the client first sends a request of its own with id 2 (a
// second eval, queued behind the first), then answers; the server's
// invoke 2 arrives while the client's request 2 is outstanding, and
// each reply goes where it belongs.
async function reverse(ws) {
  const send = (m) => ws.send(JSON.stringify({ jsonrpc: "2.0", ...m }));
  send({ id: 1, method: "eval", params: { code: "const a = await notify({message: 'one'}); const b = await notify({message: 'two'}); a + ' ' + b" } });
  let m = await ws.next();
  if (!(m.method === "invoke" && m.id === 1 && m.params.name === "notify" && m.params.input.message === "one")) fail(`first invoke: ${JSON.stringify(m)}`);
  send({ id: 2, method: "eval", params: { code: "'second'" } });
  send({ id: 1, result: "seen one" });
  m = await ws.next();
  if (!(m.method === "invoke" && m.id === 2 && m.params.input.message === "two")) fail(`second invoke: ${JSON.stringify(m)}`);
  send({ id: 2, result: "seen two" });
  const r1 = await ws.next();
  const r2 = await ws.next();
  check("reverse invoke with colliding ids", r1.id === 1 && r1.result && r1.result.value === "seen one seen two" && r2.id === 2 && r2.result && r2.result.value === "second", [r1, r2]);
}

// references: an eval hands the client a function; the client invokes
// it by ref mid-eval with the id of the server's outstanding invoke (3),
// answers with its value, and releases it.
async function references(ws) {
  const send = (m) => ws.send(JSON.stringify({ jsonrpc: "2.0", ...m }));
  send({ id: 1, method: "eval", params: { code: "(await apply({f: async (n) => (await org_example_notes_create({title: 'n' + n})).data.title})) + '!'" } });
  let m = await ws.next();
  if (!(m.method === "invoke" && m.id === 3 && m.params.name === "apply" && typeof m.params.input.f.$fn === "string")) fail(`apply invoke: ${JSON.stringify(m)}`);
  const ref = m.params.input.f.$fn;
  send({ id: 3, method: "invoke", params: { ref, input: 7 } });
  const r = await ws.next();
  if (!(r.id === 3 && r.result === "n7")) fail(`ref invoke: ${JSON.stringify(r)}`);
  send({ id: 3, result: r.result });
  const e = await ws.next();
  send({ method: "release_ref", params: { ref } });
  const gone = await call(ws, 4, "invoke", { ref, input: 1 });
  check("function reference invoked mid-eval, then released", e.id === 1 && e.result && e.result.value === "n7!" && gone.error && gone.error.code === -32602, [e, gone]);
}

// clientReferences: the client answers counter with a function
// reference of its own ("f1", the sandbox's first id too, on purpose);
// the eval calls it (the server's invoke with {ref, input}, id 5) and
// releases it, which the server tells the client with release_ref.
async function clientReferences(ws) {
  const send = (m) => ws.send(JSON.stringify({ jsonrpc: "2.0", ...m }));
  send({ id: 1, method: "eval", params: { code: "{ const inc = await counter(null); const x = await inc(5); inc.release(); [typeof inc, x * 2] }" } });
  let m = await ws.next();
  if (!(m.method === "invoke" && m.id === 4 && m.params.name === "counter")) fail(`counter invoke: ${JSON.stringify(m)}`);
  send({ id: 4, result: { $fn: "f1" } });
  m = await ws.next();
  if (!(m.method === "invoke" && m.id === 5 && m.params.ref === "f1" && m.params.input === 5)) fail(`ref invoke: ${JSON.stringify(m)}`);
  send({ id: 5, result: 6 });
  const rel = await ws.next();
  const e = await ws.next();
  check("the client's function reference called and released", rel.method === "release_ref" && rel.id === undefined && rel.params.ref === "f1" &&
    e.id === 1 && e.result && JSON.stringify(e.result.value) === '["function",12]', [rel, e]);
}

const [kind, where, token] = process.argv.slice(2);
if (kind === "tcp") {
  try {
    const ws = await open(where, { Authorization: "Bearer wrong" });
    ws.terminate();
    fail("a wrong token was served");
  } catch (e) {
    check("wrong token refused", e.status === 401, e);
  }
  try {
    const ws = await open(where, { Authorization: "Bearer " + token, Origin: "https://evil.example" });
    ws.terminate();
    fail("a foreign Origin was served");
  } catch (e) {
    check("foreign origin refused", e.status === 403, e);
  }
  await session(await open(where, { Authorization: "Bearer " + token }));
} else {
  await session(await open("ws+unix://" + where + ":/", {}));
}
process.exit(0);
