// Request fuzz: hostile requests at the built worker in workerd (Miniflare,
// real Durable Objects, D1 and Queues), over real loopback sockets.
//
//   node fuzz/requests.mjs [count] [seed]   (make fuzz: 100,000; make test: 3,000)
//   FUZZ_ONLY="odd paths" node fuzz/requests.mjs 1000   (one category)
//
// Request N of a run is drawn from a generator seeded by (seed, N): a run
// repeats with its seed, whatever order the senders took the requests in.
// Then checks, and exits non-zero on any violation:
// - no response >= 500, no dropped connection;
// - no row in any D1 table, and no inbox, for a request that was not a
//   valid new event: ledger rows = "processed" replies, and every refused
//   event's inbox is empty;
// - no "panicked" line in the runtime's log;
// - a valid event afterwards is processed normally.
// Traffic goes to 127.0.0.1 only; the run is bounded by its count.
// needs: stripe, github, demos
import { Agent, request } from "node:http";
import { pathToFileURL } from "node:url";

import { prng } from "../tests/support/prng.mjs";
import { startWorker } from "../tests/support/worker.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders } from "../tests/support/sign.mjs";

const STRIPE = "whsec_test_current";
const GITHUB = "gh_test_secret";
const TOKEN = "fuzz-admin-token-0123456789abcdef";

/** The hostile requests, by category. Each returns { method, path, headers, body, chunks?, event? }. */
/** `n` bytes from `rand`. */
function bytes(rand, n) {
  const out = Buffer.alloc(n + 3);
  for (let i = 0; i < n; i += 4) out.writeUInt32LE(Math.floor(rand() * 4294967296), i);
  return out.subarray(0, n);
}

/** The generators of request number `index`, all drawing on `rand`. */
function generators(rand, index) {
  const pick = (list) => list[Math.floor(rand() * list.length)];
  const int = (n) => Math.floor(rand() * n);
  const junk = (n) => bytes(rand, n);
  const text = (n) => junk(n).toString("base64").slice(0, n);
  let ids = 0;
  const id = () => `evt_fuzz_${index}_${ids++}`;
  const signedStripe = (body, extra = {}) => ({
    method: "POST",
    path: "/webhooks/stripe",
    headers: { ...stripeHeaders(body, STRIPE), ...extra },
    body,
  });
  const deep = (n) => "[".repeat(n) + "]".repeat(n);
  return {
    "random bytes": () => ({
      method: "POST",
      path: pick(["/webhooks/stripe", "/webhooks/github"]),
      headers: pick([{}, { "stripe-signature": `t=${int(2e9)},v1=${text(64)}` }, { "x-hub-signature-256": `sha256=${text(64)}` }]),
      body: junk(int(4096)),
    }),
    "signed non-events": () => {
      const bodies = [
        "null",
        "[]",
        "[1,2,3]",
        '"a string"',
        "42",
        JSON.stringify({ id: 12345, type: "x" }),
        JSON.stringify({ id: "", type: "x" }),
        JSON.stringify({ id: "x".repeat(5000), type: "invoice.created" }),
        JSON.stringify({ type: "checkout.session.completed" }),
        "",
        "{",
      ];
      const pickText = pick(bodies);
      if (rand() < 0.15) {
        // Not UTF-8, but signed.
        const event = id();
        const bytes = Buffer.concat([Buffer.from(`{"id":"${event}","type":"x","n":"`), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]);
        const t = Math.floor(Date.now() / 1000);
        const { createHmac } = globalThis.__crypto;
        const sig = createHmac("sha256", STRIPE).update(Buffer.concat([Buffer.from(`${t}.`), bytes])).digest("hex");
        return { method: "POST", path: "/webhooks/stripe", headers: { "stripe-signature": `t=${t},v1=${sig}` }, body: bytes, event };
      }
      const req = signedStripe(pickText);
      const parsedId = (() => {
        try {
          return JSON.parse(pickText)?.id;
        } catch {
          return undefined;
        }
      })();
      return typeof parsedId === "string" && parsedId ? { ...req, event: parsedId } : req;
    },
    "signed hostile fields": () => {
      const variants = [
        (e) => checkoutCompleted({ id: e, amount: -500 }),
        (e) => checkoutCompleted({ id: e, amount: 1e300 }),
        (e) => checkoutCompleted({ id: e, amount: 2 ** 62 }),
        (e) => checkoutCompleted({ id: e, email: "<script>alert(1)</script>@example.com" }),
        (e) => JSON.stringify({ id: e, type: "<img src=x onerror=alert(1)>", created: 1, data: { object: {} } }),
        (e) => JSON.stringify({ id: e, type: "checkout.session.completed", created: 1, data: { object: [] } }),
        (e) => `{"id":"${e}","type":"checkout.session.completed","created":1,"data":${deep(5000)}}`,
        (e) => JSON.stringify({ id: e, type: "customer.subscription.updated", created: "yesterday", data: { object: { id: "sub" } } }),
      ];
      const event = id();
      return { ...signedStripe(pick(variants)(event)), event };
    },
    "garbled signature headers": () => {
      const body = checkoutCompleted({ id: id() });
      const good = stripeHeaders(body, STRIPE)["stripe-signature"];
      const variants = [
        "",
        "t=",
        ",,,,",
        `t=${"9".repeat(40)},v1=${"a".repeat(64)}`,
        `${good},${good}`,
        good.replace("v1=", "v0="),
        good.toUpperCase(),
        `t=1,${"v1=00,".repeat(2000)}`,
        text(12_000),
        "\u00e9\u00e8",
      ];
      return { method: "POST", path: "/webhooks/stripe", headers: { "stripe-signature": pick(variants) }, body, event: JSON.parse(body).id };
    },
    "many headers": () => {
      const headers = {};
      for (let i = 0; i < 150; i++) headers[`x-junk-${i}`] = text(20);
      const body = starEvent({ repo: "fuzz/many" });
      const event = id();
      return { method: "POST", path: "/webhooks/github", headers: { ...headers, "x-github-delivery": event, "x-github-event": "star", "x-hub-signature-256": `sha256=${"0".repeat(64)}` }, body, event, source: "github" };
    },
    "wrong methods": () => {
      const method = pick(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]);
      // Some with a body, which no route reads on these methods.
      const body = ["PUT", "DELETE", "PATCH"].includes(method) && rand() < 0.5 ? junk(int(8192)) : null;
      return { method, path: pick(["/webhooks/stripe", "/webhooks/github", "/", "/admin/login", "/admin/api/events"]), headers: {}, body };
    },
    "large bodies elsewhere": () => ({
      method: pick(["POST", "PUT"]),
      path: pick(["/", "/admin/api/events/stripe/x/replay", "/webhooks/unknown-source", "/nope"]),
      headers: {},
      body: junk(65 * 1024 + int(64 * 1024)),
      // Past what is read, the server closes the connection after answering.
      own: true,
    }),
    "odd paths": () => ({
      method: "POST",
      path: pick([
        "/webhooks/__proto__",
        "/webhooks/constructor",
        "/webhooks/toString",
        "/webhooks/%2e%2e",
        "/webhooks/stripe/extra",
        "/webhooks/",
        "/webhooks//stripe",
        "/webhooks/STRIPE",
        "/webhooks/str%69pe",
        "/webhooks/%00",
        "/webhooks/" + "a".repeat(3000),
        "/admin/api/../../webhooks/stripe",
        "/admin/api/events/%2F%2F/x/replay",
        "/admin/events/stripe/x/dismiss",
        "/nope",
      ]),
      headers: stripeHeaders("{}", STRIPE),
      body: "{}",
    }),
    "chunked over the cap": () => {
      const path = pick(["/webhooks/stripe", "/admin/login"]);
      return {
        method: "POST",
        path,
        headers: { "stripe-signature": "t=1,v1=00" },
        chunks: 40, // 40 x 64 KiB = 2.5 MiB, past the 1 MiB cap
        cap: path === "/admin/login" ? 8 * 1024 : 1024 * 1024,
      };
    },
    "junk admin tokens and cookies": () =>
      pick([
        () => ({ method: "GET", path: "/admin/api/events", headers: { authorization: `Bearer ${text(int(200))}` }, body: null }),
        () => ({ method: "POST", path: "/admin/api/events/stripe/x/replay", headers: { authorization: pick(["Bearer", "Basic abc", `Bearer ${TOKEN}x`, ""]) }, body: null }),
        () => ({ method: "GET", path: "/admin", headers: { cookie: `admin_session=${text(80)}; admin_session=${int(1e13)}.${text(64)}` }, body: null }),
        () => ({ method: "POST", path: "/admin/login", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `token=${encodeURIComponent(text(int(300)))}` }),
        () => ({ method: "POST", path: "/admin/logout", headers: {}, body: null }),
      ])(),
  };
}

function send(agent, origin, req) {
  return new Promise((resolve) => {
    const url = new URL(req.path, origin);
    // A body refused mid-stream leaves its connection unusable (the server
    // closes it after answering): such a request gets a connection of its
    // own, so that no other request is queued behind it.
    const own = req.chunks || req.own ? false : agent;
    // Frame every body: Node sends a DELETE's body unframed unless told its
    // length, and the server would read it as the next request.
    const headers = req.body == null ? req.headers : { ...req.headers, "content-length": Buffer.byteLength(req.body) };
    const r = request(url, { method: req.method, headers, agent: own }, (res) => {
      res.resume();
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => {
        if (body.length < 300) body += d;
      });
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", (error) => resolve({ error: `response: ${error.code ?? error.message}` }));
    });
    let answered = false;
    r.on("response", () => (answered = true));
    // A request the worker never answers is a failure too (a hung isolate).
    r.setTimeout(10_000, () => r.destroy(new Error("no answer in 10 s")));
    // After the answer, the server may close a connection whose body it did
    // not read: that is not a dropped connection.
    let i = 0;
    r.on("error", (error) => {
      if (answered) return;
      // Sending on past the cap, the client may see the server's reset
      // before the 413 that preceded it (TCP discards the answer when the
      // server closes with the rest of the body unread): the server refused
      // the body, it did not drop the connection.
      const sentPastCap = req.chunks && i * 64 * 1024 > req.cap;
      resolve(sentPastCap ? { status: "reset past the cap" } : { error: error.code ?? error.message });
    });
    if (req.chunks) {
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      const pump = () => {
        while (i < req.chunks) {
          i++;
          if (!r.write(chunk)) return r.once("drain", pump);
        }
        r.end();
      };
      r.on("response", () => (i = req.chunks));
      pump();
    } else {
      r.end(req.body ?? undefined);
    }
  });
}

/** What each category may be answered: anything else is a violation (a
 * forgery accepted, a refusal of the wrong kind, a category that broke). */
const EXPECTED = {
  "random bytes": [401],
  "signed non-events": [400],
  "signed hostile fields": [200, 400],
  "garbled signature headers": [401],
  "many headers": [401],
  "wrong methods": [200, 401, 405],
  "large bodies elsewhere": [404, 413],
  "odd paths": [200, 400, 401, 404],
  "chunked over the cap": [413, "reset past the cap"],
  "junk admin tokens and cookies": [303, 401, 429],
};

/** Runs `count` hostile requests; returns the report and the violations. */
export async function runFuzz({ count = 100_000, concurrency = 32, seed = 8, log = console.log } = {}) {
  globalThis.__crypto = await import("node:crypto");
  const w = await startWorker({ ADMIN_TOKEN: TOKEN, STATS_FLUSH_MS: "60000" }, { port: 0 });
  const violations = [];
  try {
    const origin = (await w.mf.ready).origin.replace("localhost", "127.0.0.1");
    const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
    const names = Object.keys(generators(prng(seed), 0));
    const counts = {};
    const processed = [];
    const refusedEvents = [];
    let next = 0;
    const started = Date.now();
    const worker = async () => {
      while (next < count) {
        // Request number `index` is the same in every run with this seed
        // (but for signing times), whatever order the senders take them in.
        const index = next++;
        const rand = prng(Math.imul(seed, 0x9e3779b1) ^ index);
        const name = process.env.FUZZ_ONLY ?? names[Math.floor(rand() * names.length)];
        const req = generators(rand, index)[name]();
        const res = await send(agent, origin, req);
        const outcome = res.error ? `error ${res.error}` : `${res.status}`;
        counts[name] ??= {};
        counts[name][outcome] = (counts[name][outcome] ?? 0) + 1;
        if (res.error) violations.push(`${name}: dropped connection (${res.error}) on ${req.method} ${req.path}`);
        else if (res.status >= 500) violations.push(`${name}: ${res.status} ${res.body.slice(0, 120)} on ${req.method} ${req.path}`);
        else if (!EXPECTED[name].includes(res.status)) {
          violations.push(`${name}: unexpected ${res.status} ${res.body.slice(0, 80)} on ${req.method} ${req.path}`);
        }
        if (!res.error && res.status === 200 && res.body.includes('"processed"')) processed.push(req.event);
        if (!res.error && res.status >= 400 && req.event) refusedEvents.push(`${req.source ?? "stripe"}:${req.event}`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const seconds = (Date.now() - started) / 1000;
    agent.destroy();

    // What was written, and by whom.
    const ledger = await w.scalar("SELECT count(*) FROM processed_events");
    if (ledger !== processed.length) violations.push(`ledger rows ${ledger}, "processed" replies ${processed.length}`);
    // No valid subscription or star event is ever sent, and no effect fails.
    const present = await w.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all();
    const tables = ["failed_events", "subscriptions", "repo_stars"].filter((t) => present.results.some((r) => r.name === t));
    for (const table of tables) {
      const n = await w.scalar(`SELECT count(*) FROM ${table}`);
      if (n !== 0) violations.push(`${table} has ${n} rows`);
    }
    for (const table of ["orders", "outbox"]) {
      const n = await w.scalar(`SELECT count(*) FROM ${table}`);
      if (n > processed.length) violations.push(`${n} ${table} rows for ${processed.length} processed events`);
    }
    for (const key of refusedEvents) {
      if ((await w.inboxState(key)) !== null) violations.push(`refused event ${key.slice(0, 80)} left an inbox`);
    }
    const panics = w.logs.filter((line) => /panicked/.test(line));
    if (panics.length) violations.push(`${panics.length} panicked lines, first: ${panics[0].slice(0, 200)}`);

    // A valid event, afterwards, is processed normally.
    const body = checkoutCompleted();
    const after = await w.post("/webhooks/stripe", body, stripeHeaders(body, STRIPE)).then((r) => r.json());
    if (after.outcome !== "processed") violations.push(`a valid event afterwards: ${JSON.stringify(after)}`);
    const star = starEvent({ repo: "fuzz/after" });
    const gh = await w
      .post("/webhooks/github", star, githubHeaders(star, GITHUB, { delivery: "fuzz-after", event: "star" }))
      .then((r) => r.json());
    if (gh.outcome !== "processed") violations.push(`a valid GitHub event afterwards: ${JSON.stringify(gh)}`);

    const statuses = {};
    for (const byStatus of Object.values(counts)) {
      for (const [status, n] of Object.entries(byStatus)) statuses[status] = (statuses[status] ?? 0) + n;
    }
    log(`request fuzz: ${count} requests in ${seconds.toFixed(1)} s (${Math.round(count / seconds)} requests/s), ${concurrency} in flight, seed ${seed}`);
    log(`by status: ${JSON.stringify(statuses)}`);
    for (const [name, byStatus] of Object.entries(counts)) log(`  ${name}: ${JSON.stringify(byStatus)}`);
    log(`ledger rows: ${ledger} (= "processed" replies: ${processed.length}); refused events' inboxes checked: ${refusedEvents.length}; panicked lines: ${panics.length}`);
    log(violations.length ? `FAIL: ${violations.length} violations` : "PASS: no 5xx, no dropped connection, no stray write, no panic");
    for (const v of violations.slice(0, 20)) log(`  ${v}`);
    return { violations, statuses, counts, seconds };
  } finally {
    await w.dispose();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const count = Number(process.argv[2] ?? 100_000);
  const seed = Number(process.argv[3] ?? 8);
  const { violations } = await runFuzz({ count, seed });
  process.exit(violations.length ? 1 : 0);
}
