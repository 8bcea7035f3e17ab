// A real third-party MCP client (the TypeScript SDK, pinned in
// package-lock.json) driving capsule-host, run by cmd/capsule-host's
// TestMCPNodeClient. It starts a background process through the shell
// capsule, subscribes to it, gets resources/updated when it prints, reads
// its output, kills it, sees the exit, and checks that a second
// principal's client lists none of it and gets the same answer for its
// URIs as for unknown ones.
//
// Environment:
//   MCP_TRANSPORT   "stdio" (default) or "http"
//   stdio: MCP_ALICE_CMD, MCP_BOB_CMD   JSON arrays: command and arguments
//   http:  MCP_URL, MCP_ALICE_TOKEN, MCP_BOB_TOKEN
// Exit 0 and the line "mcp-client: all checks passed" on success.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const WAIT_MS = 30000;

function fail(msg) {
  console.error("mcp-client: FAIL: " + msg);
  process.exit(1);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

async function open(who) {
  const client = new Client({ name: "capsule-host-node-test", version: "1.0.0" });
  const updates = [];
  const waiters = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    updates.push(n.params.uri);
    for (const w of waiters.splice(0)) w();
  });
  let transport;
  if ((process.env.MCP_TRANSPORT || "stdio") === "http") {
    const token = process.env["MCP_" + who.toUpperCase() + "_TOKEN"];
    transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
      requestInit: { headers: { Authorization: "Bearer " + token } },
    });
  } else {
    const argv = JSON.parse(process.env["MCP_" + who.toUpperCase() + "_CMD"]);
    transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), stderr: "inherit" });
  }
  await client.connect(transport);
  // waitUpdate resolves once uri has been reported (now or later).
  client.waitUpdate = async (uri) => {
    const deadline = Date.now() + WAIT_MS;
    while (!updates.includes(uri)) {
      const left = deadline - Date.now();
      check(left > 0, "no resources/updated for " + uri + " within " + WAIT_MS + " ms");
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
    updates.splice(0);
  };
  return client;
}

async function callOK(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  check(!res.isError, name + " failed: " + JSON.stringify(res.content));
  return res.structuredContent;
}

async function rpcError(promise) {
  try {
    await promise;
  } catch (e) {
    return { code: e.code, message: e.message };
  }
  fail("a request that should fail succeeded");
}

const alice = await open("alice");
const tools = (await alice.listTools()).tools.map((t) => t.name);
for (const want of ["shell__spawn_background_process", "shell__write_process_stdin", "shell__kill_process", "list_processes"]) {
  check(tools.includes(want), "tools/list lacks " + want + ": " + tools.join(", "));
}

const spawned = await callOK(alice, "shell__spawn_background_process", {
  command: 'read l; echo "got $l"; exec sleep 600',
  keep_stdin_open: true,
  label: "node-test",
});
const id = spawned.id;
check(typeof id === "string" && id.length > 0, "spawn returned no id: " + JSON.stringify(spawned));
const base = "capsule-host://process/" + encodeURIComponent(id);
const stdout = base + "/stdout";
const status = base + "/status";

const listed = (await alice.listResources()).resources.map((r) => r.uri);
check(listed.includes(stdout) && listed.includes(status), "resources/list lacks the process: " + listed.join(", "));

await alice.subscribeResource({ uri: stdout });
await alice.subscribeResource({ uri: status });
await callOK(alice, "shell__write_process_stdin", { id, data: "ping\n" });
await alice.waitUpdate(stdout);
const read = await alice.readResource({ uri: stdout });
check(read.contents.length === 1 && read.contents[0].text === "got ping\n", "stdout read: " + JSON.stringify(read.contents));

// A second principal sees none of it.
const bob = await open("bob");
check((await bob.listResources()).resources.length === 0, "bob's resources/list is not empty");
const bobList = await callOK(bob, "list_processes", {});
check(bobList.processes.length === 0, "bob's list_processes: " + JSON.stringify(bobList));
const theirs = await rpcError(bob.subscribeResource({ uri: stdout }));
const unknown = await rpcError(bob.subscribeResource({ uri: "capsule-host://process/no-such-id/stdout" }));
check(theirs.code === unknown.code && theirs.message === unknown.message,
  "another principal's URI answers " + JSON.stringify(theirs) + ", an unknown one " + JSON.stringify(unknown));
const bobRead = await rpcError(bob.readResource({ uri: stdout }));
check(bobRead.code === unknown.code, "bob reading alice's stdout: " + JSON.stringify(bobRead));

// Kill it and see the exit.
await callOK(alice, "shell__kill_process", { id, grace_ms: 1000 });
await alice.waitUpdate(status);
const st = JSON.parse((await alice.readResource({ uri: status })).contents[0].text);
check(st.phase === "exited", "status after the kill: " + JSON.stringify(st));

await bob.close();
await alice.close();
console.log("mcp-client: all checks passed");
