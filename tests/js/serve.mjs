// Starts a real `gdn serve` on a free loopback port for the client tests; resolves to
// {port, exited (a promise of the exit code), log(), stop()}.
import { spawn } from "node:child_process";

export async function startServer(gdn, modelDir, extraArgs = []) {
  const server = spawn(gdn, ["serve", "--model", modelDir, "--port", "0", "--served-model-name", "demo",
                             "--api-key", "test-key", "--cache-memory", "64", "--max-model-len", "1024", ...extraArgs],
                       { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + log)), 60000);
    server.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    server.on("exit", (code) => reject(new Error(`server exited (${code}):\n` + log)));
  });
  const exited = new Promise((resolve) => server.on("exit", resolve));
  return { port, exited, log: () => log, stop: () => server.kill("SIGTERM") };
}

// check(name, fn): runs one case, counts it, prints ok / FAIL.
export function makeChecker() {
  const counts = { passed: 0, failed: 0 };
  async function check(name, fn) {
    try { await fn(); counts.passed++; console.log(`ok   ${name}`); }
    catch (e) { counts.failed++; console.log(`FAIL ${name}: ${e.stack ?? e.message}`); }
  }
  return { check, counts };
}

export function assert(c, msg) { if (!c) throw new Error(msg); }
