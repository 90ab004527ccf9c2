// A local HTTP sink to try forwarding with (docs/forwarding.md, "Configure"):
// it verifies each request as your backend would, with the Standard
// Webhooks reference library, prints one line per request, and answers
// 200 (or SINK_STATUS, to see retries and the breaker). Loopback only.
//
//   make sink     or   node scripts/sink.mjs [port]     (default 9000)
//
// The key is BACKEND_SIGNING_SECRET, from the environment or .dev.vars
// (or .dev.vars.example, which `make dev` copies to it).
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const port = Number(process.argv[2] ?? 9000);
const status = Number(process.env.SINK_STATUS ?? 200);
// .dev.vars, or the example `make dev` copies it from.
const fromDevVars = () => {
  const file = [".dev.vars", ".dev.vars.example"].find(existsSync);
  return file && readFileSync(file, "utf8").match(/^BACKEND_SIGNING_SECRET\s*=\s*"?([^"\n]+)"?/m)?.[1];
};
const secret = process.env.BACKEND_SIGNING_SECRET ?? fromDevVars();
if (!secret) {
  console.error("BACKEND_SIGNING_SECRET is not set (in the environment or .dev.vars)");
  process.exit(1);
}
const webhook = new Webhook(secret.trim());
const seen = new Set();

createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString();
    const h = req.headers;
    let verdict;
    try {
      webhook.verify(body, h, { jsonParse: false });
      verdict = seen.has(h["webhook-id"]) ? "verified, seen before (dedupe on webhook-id)" : "verified";
      seen.add(h["webhook-id"]);
    } catch (e) {
      verdict = `NOT verified: ${e.message}`;
    }
    console.log(`${req.method} ${req.url} ${h["x-webhook-source"]}:${h["x-webhook-event-id"]} ${h["x-webhook-event-type"]} ` +
      `${Buffer.byteLength(body)} B webhook-id ${h["webhook-id"]?.slice(0, 12)}… ${verdict} -> ${status}`);
    res.writeHead(status, { "content-type": "application/json" }).end('{"ok":true}');
  });
}).listen(port, "127.0.0.1", () => console.log(`sink on http://127.0.0.1:${port}/ (answers ${status})`));
