// Serves the reference gateway as `make dev`'s runner serves this worker
// (wrangler's API, without the DevTools link), so that bench/gateway.mjs
// compares the two under one harness. Loopback only.
//
//   node bench/reference/serve.mjs <port> <persist dir> <env file>
import { unstable_startWorker } from "wrangler";

const [port, persist, envFile] = process.argv.slice(2);
const worker = await unstable_startWorker({
  config: "bench/reference/wrangler.toml",
  envFiles: [envFile],
  sendMetrics: false,
  dev: { remote: false, inspector: false, server: { hostname: "127.0.0.1", port: Number(port) }, persist },
});
worker.raw.once("error", (e) => {
  console.error(`reference: ${e.reason ?? e.message}`);
  process.exit(1);
});
await worker.ready;
