// Serves the reference gateway as `make dev`'s runner serves this worker
// (wrangler's API, without the DevTools link), so that bench/gateway.mjs
// compares the two under one harness. Loopback only.
//
//   node bench/reference/serve.mjs --port N --persist-to DIR --env-file FILE
//   (the runner's flags: tests/support/dev.mjs starts either)
import { parseArgs } from "node:util";
import { unstable_startWorker } from "wrangler";

const { values: options } = parseArgs({
  options: { port: { type: "string" }, "persist-to": { type: "string" }, "env-file": { type: "string" } },
});
const worker = await unstable_startWorker({
  config: "bench/reference/wrangler.toml",
  envFiles: [options["env-file"]],
  sendMetrics: false,
  dev: { remote: false, inspector: false, server: { hostname: "127.0.0.1", port: Number(options.port) }, persist: options["persist-to"] },
});
worker.raw.once("error", (e) => {
  console.error(`reference: ${e.reason ?? e.message}`);
  process.exit(1);
});
await worker.ready;
