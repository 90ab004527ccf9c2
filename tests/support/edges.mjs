// What the edge tests share (tests/edges-*.test.mjs): the worker they
// start, its secrets and admin token, and their helpers.
// needs: everything
import assert from "node:assert/strict";
import { request } from "node:http";

import { SECRETS, startWorker } from "./worker.mjs";
import { githubHeaders, stripeHeaders } from "./sign.mjs";

export const STRIPE = "whsec_test_current";
export const GITHUB = SECRETS.GITHUB_WEBHOOK_SECRET;
export const TOKEN = "edges-admin-token-0123456789abcdef";

/** The worker the edge tests share, on a loopback port. */
export const edgeWorker = () =>
  startWorker({ ADMIN_TOKEN: TOKEN, NOTIFY_URL: "http://chat.test/hook", OUTBOX_RELAY_GRACE_MS: "0" }, { port: 0 });

export const reply = async (res) => ({ status: res.status, body: await res.json() });
export const sendStripe = (worker, body, headers = {}) =>
  worker.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), ...headers }).then(reply);
export const sendGithub = (worker, body, delivery, event = "star") =>
  worker.post("/webhooks/github", body, githubHeaders(body, GITHUB, { delivery, event })).then(reply);
export const adminJson = async (worker, path, method = "GET") => {
  const res = await worker.mf.dispatchFetch(`http://localhost/admin/api/${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
};
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Counts of every table an effect could touch (the demos' as far as they are there). */
export async function tableCounts(worker) {
  const counts = {};
  const tables = await worker.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB '_cf_*' AND name NOT GLOB 'sqlite_*' AND name NOT IN ('source_counters', 'delivery_trend', 'd1_migrations')").all();
  for (const { name: table } of tables.results) {
    counts[table] = await worker.scalar(`SELECT count(*) FROM ${table}`);
  }
  return counts;
}

/** POSTs `total` bytes in chunks without a Content-Length; resolves with the
 * status and how many bytes had been written when the answer came. A server
 * that answers and closes while the client is still sending may reset the
 * connection, and the reset can discard its answer before the client reads
 * it: that resolves with `reset: true` (the server stopped reading early all
 * the same). */
export function chunkedPost(url, total, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "transfer-encoding": "chunked", ...headers } });
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let written = 0;
    let answered = false;
    req.on("response", (res) => {
      answered = true;
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, written }));
    });
    req.on("error", (e) => {
      if (answered) return;
      answered = true;
      if (e.code === "ECONNRESET" || e.code === "EPIPE") resolve({ status: null, reset: true, written });
      else reject(e);
    });
    const pump = () => {
      while (!answered && written < total) {
        written += chunk.length;
        if (!req.write(chunk)) return req.once("drain", pump);
      }
      if (!answered) req.end();
    };
    pump();
  });
}
