// Admin fuzz: hostile requests at the admin API and the dashboard of the
// built worker in workerd (Miniflare, real Durable Objects and D1), over
// real loopback sockets.
//
//   node fuzz/admin.mjs [count] [seed]   (make fuzz: 20,000; make test: 2,000)
//   FUZZ_ONLY="forged actions" node fuzz/admin.mjs 1000   (one category)
//
// Real targets first: a processed event, two failed ones, a dead side
// effect and a GitHub star; an operator signs in (from an address that
// never fails a credential) and takes the form token from a page, as do a
// second session and a third, signed out. Request
// N is drawn from a generator seeded by (seed, N), as in requests.mjs. Then
// checks, and exits non-zero on any violation:
// - every answer is one its request may get (no 5xx, no dropped
//   connection, no forged action let through, the operator never throttled);
// - no state change: every D1 table and the targets' inboxes are the same
//   after the run as before it, and no action was audited as done;
// - no markup from a path or query on a dashboard page; no "panicked" line;
// - afterwards, the operator's own Replay, Dismiss, Requeue and sign-out
//   work (a fuzz that everything refused would fail here).
// Traffic goes to 127.0.0.1 only; the run is bounded by its count.
// needs: stripe, github, demos, dashboard
import { createHmac } from "node:crypto";
import { Agent, request } from "node:http";
import { isDeepStrictEqual } from "node:util";
import { pathToFileURL } from "node:url";

import { prng } from "../tests/support/prng.mjs";
import { eventually, startWorker } from "../tests/support/worker.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders } from "../tests/support/sign.mjs";

const TOKEN = "fuzz-admin-token-0123456789abcdef";
const STRIPE = "whsec_test_current";
/** The operator's address: it never presents a wrong credential, so no
 * number of others' failures may throttle it. No guesser uses 192.0.2.0/24. */
const OPERATOR = "192.0.2.10";
const FORM = "application/x-www-form-urlencoded";
/** Echoed unescaped into a page, this would be markup from a request. */
const MARKUP = "<x-fuzz";
const IDS = { done: "evt_afz_done", failed: "evt_afz_failed", spare: "evt_afz_spare", dead: "evt_afz_dead" };
const DEAD_EMAIL = "dead-afz@example.com";

// The dashboard's cookie and form token, computed as crates/engine/src/admin/mod.rs does,
// to forge sessions that are right in all but one respect (expired, from
// the future).
const hmac = (...parts) => parts.reduce((mac, p) => mac.update(p), createHmac("sha256", TOKEN)).digest("hex");
const sessionValue = (issued) => `${issued}.${hmac("dashboard-session\n", String(issued))}`;
const formToken = (value) => hmac("dashboard-form\n", value);
const forged = (issued) => ({ cookie: `admin_session=${sessionValue(issued)}`, form: formToken(sessionValue(issued)) });

/** `s`, with every character a request line cannot carry percent-encoded
 * as UTF-8 (a `%` stays as it is: malformed escapes are the point). */
const wire = (s) => s.replace(/[^\x21-\x7e]/gu, (c) => [...Buffer.from(c)].map((b) => `%${b.toString(16).padStart(2, "0")}`).join(""));

/** The request generators, by category, drawing on `rand` (seeded by the
 * request's number); `t` holds the targets and sessions. Each request says
 * which statuses it may get. */
function generators(rand, t) {
  const pick = (list) => list[Math.floor(rand() * list.length)];
  const int = (n) => Math.floor(rand() * n);
  const text = (n) => Buffer.from(Array.from({ length: n }, () => int(256))).toString("base64").slice(0, n);
  const hex = (n) => Array.from({ length: n }, () => "0123456789abcdef"[int(16)]).join("");
  const chars = () => String.fromCodePoint(...Array.from({ length: 1 + int(6) }, () => pick([0, 0x1f, 0x7f, 0xe9, 0x202e, 0xfeff, 0x1f600, 0x10ffff])));
  const segment = () =>
    pick([
      () => text(1 + int(40)),
      () => wire(chars()),
      () => pick(["..", ".", "%2e%2e", "%2F", "%2f%2f", "%00", "%", "%%", "%zz", "%E0%A4%A", "%C0%AE", "%ff", "%252F", "+", "%20", "'", '"', ";", "=", "*", "__proto__", "constructor"]),
      () => pick([`${MARKUP}>`, `%3Cx-fuzz%3E`, `"${MARKUP}`]),
      () => "a".repeat(int(5000)),
      () => pick(["-1", "0", "1e308", "NaN", "99999999999999999999", String(int(1e12))]),
      () => pick(["stripe", "github", "STRIPE", "stripe%3Aevt_afz_done", ...Object.values(IDS), `${IDS.done}%00`, IDS.done.toUpperCase(), `%2520${IDS.failed}`]),
    ])();
  const value = () =>
    pick([
      () => "",
      () => wire(text(int(60))),
      () => wire(chars()),
      () => pick(["-1", "0", "1", "500", "501", "-0", "+5", "0x10", "1e3", "NaN", "Infinity", "9".repeat(400), "2147483648", "18446744073709551616"]),
      () => pick(["processed", "failed", "dead", "pending", "sending", "sent", "dismissed", "PROCESSED", "failed%00", "failed,processed"]),
      () => pick(["2024-02-30", "9999-12-31", "0000-00-00", "1970-01-01", "+275760-09-13", "2024-13-01", "2024-1-1", "-001-01-01"]),
      () => pick(["%", "%%", "%zz", "&", "==", "%26", "%3D", "%00", `${MARKUP}>`, "%3Cx-fuzz%3E", wire("'; DROP TABLE outbox; --")]),
      () => pick([...Object.values(IDS), `stripe:${IDS.done}`, t.deadKey, "applied", "requeued", "no-event"]),
    ])();
  const query = () => {
    const names = ["status", "source", "type", "limit", "q", "from", "to", "after", "after_source", "after_id", "done", "cursor", "offset", "form_token", "__proto__", "", "limit[]", "a".repeat(500)];
    const params = Array.from({ length: int(6) }, () => `${pick(names)}=${value()}`);
    return params.length ? `?${params.join("&")}` : "";
  };
  const path = (n) => Array.from({ length: n }, segment).join("/");
  const guesser = () =>
    pick([
      () => `203.0.113.${int(256)}`,
      () => `198.18.${int(256)}.${int(256)}`,
      () => `2001:db8:${int(4)}:${int(4)}::${int(65536).toString(16)}`,
      () => `::ffff:203.0.113.${int(256)}`,
      () => text(1 + int(30)),
      () => null, // none: Miniflare says 127.0.0.1
    ])();
  // Some with a body, which no route reads on these methods.
  const otherMethod = () => {
    const method = pick(["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]);
    return { method, body: method !== "HEAD" && rand() < 0.5 ? text(int(2000)) : null };
  };
  const from = (address) => (address === null ? {} : { "cf-connecting-ip": address });
  const operator = { "cf-connecting-ip": OPERATOR };
  // Both credentials: a path that `..` takes out of the API into the
  // dashboard, or back, is still the operator's.
  const signedIn = { ...operator, authorization: `Bearer ${TOKEN}`, cookie: t.op.cookie };
  const actionPath = () =>
    pick([
      `/admin/events/stripe/${IDS.failed}/${pick(["replay", "dismiss"])}`,
      `/admin/events/stripe/${IDS.done}/replay`,
      `/admin/events/stripe/${IDS.failed.replace("_", "%5F")}/dismiss`,
      `/admin/outbox/${encodeURIComponent(t.deadKey)}/requeue`,
    ]);
  const junkBearer = () =>
    pick([`Bearer ${text(int(200))}`, `Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, `bearer ${TOKEN}`, `Bearer  ${TOKEN}`, TOKEN, `Basic ${Buffer.from(`admin:${TOKEN}`).toString("base64")}`, "Bearer", "Bearer %00"]);
  const junkCookie = () =>
    pick([
      `admin_session=${text(80)}`,
      `admin_session=${Date.now()}.${hex(64)}`,
      `Admin_Session=${t.op.value}`,
      `admin_session="${t.op.value}"`,
      `admin_session=${t.op.value.slice(0, -1)}${t.op.value.endsWith("0") ? "1" : "0"}`,
      `xadmin_session=${t.op.value}`,
      forged(Date.now() - 12 * 3600_000 - 60_000).cookie,
      forged(Date.now() + 600_000).cookie,
      t.revoked.cookie,
    ]);
  return {
    // (a) The API, signed in, with hostile paths and queries: reads only,
    // and actions on targets that do not exist.
    "api, hostile paths and queries": () => {
      const headers = signedIn;
      return pick([
        () => ({ method: "GET", path: `/admin/api/${pick(["events", "outbox", "stats"])}?status=${value()}${query().replace("?", "&")}`, headers, expect: [200, 400] }),
        () => ({ method: "GET", path: `/admin/api/events/${pick(["stripe", "github", segment()])}/${segment()}${query()}`, headers, expect: [200, 400, 404] }),
        () => ({ method: "GET", path: `/admin/api/events/${path(1 + int(3))}${query()}`, headers, expect: [200, 400, 404] }),
        () => ({ method: "GET", path: `/admin/api/${path(1 + int(4))}${query()}`, headers, expect: [200, 400, 404] }),
        () => ({ method: "POST", path: `/admin/api/events/${text(8)}/${path(1)}_${int(1e9)}/${pick(["replay", "dismiss"])}`, headers, expect: [404] }),
        () => ({ method: "POST", path: `/admin/api/outbox/${path(1)}_${int(1e9)}/requeue${query()}`, headers, expect: [404] }),
        () => ({ ...otherMethod(), path: `/admin/api/${pick(["events", "stats", `outbox/${encodeURIComponent(t.deadKey)}/requeue`])}`, headers, expect: [404] }),
      ])();
    },
    // (b) No credential, or a wrong one, from many addresses: the
    // throttle counts them, and refuses (429) past its limits.
    "junk credentials": () => {
      const address = guesser();
      return pick([
        () => ({ method: pick(["GET", "POST"]), path: pick(["/admin/api/events", "/admin/api/stats", "/admin/api/outbox?status=dead", actionPath().replace("/admin/", "/admin/api/")]), headers: from(address), expect: [401] }),
        () => ({ method: "GET", path: `/admin/api/${pick(["events", "stats", `events/stripe/${IDS.failed}`])}`, headers: { ...from(address), authorization: junkBearer() }, expect: [401, 429] }),
        () => ({ method: "POST", path: actionPath().replace("/admin/", "/admin/api/"), headers: { ...from(address), authorization: junkBearer() }, expect: [401, 429] }),
        () => ({ method: "GET", path: pick(["/admin", "/admin/events", `/admin/events/stripe/${IDS.failed}`]), headers: rand() < 0.8 ? { ...from(address), cookie: junkCookie() } : from(address), expect: [401] }),
        () => {
          const token = pick([text(int(300)), `${TOKEN}x`, TOKEN.slice(1), `${TOKEN}%00`, `${TOKEN}+`, TOKEN.toUpperCase()]);
          const body = pick([`token=${token}`, `token=x&token=${TOKEN}`, `TOKEN=${TOKEN}`, `token%3D${TOKEN}`, ""]);
          return { method: "POST", path: "/admin/login", headers: { ...from(address), "content-type": FORM }, body, expect: [401, 429] };
        },
        () => ({ method: "POST", path: "/admin/logout", headers: rand() < 0.5 ? { ...from(address), cookie: junkCookie() } : from(address), expect: [303] }),
      ])();
    },
    // (c) The dashboard, signed in, with hostile paths, queries and cookies.
    "dashboard, hostile paths and queries": () => {
      const cookie = pick([t.op.cookie, `${Array.from({ length: 40 }, () => `admin_session=${text(40)}`).join("; ")}; ${t.op.cookie}`]);
      const headers = { ...signedIn, cookie };
      return pick([
        () => ({ method: "GET", path: `/admin${query()}`, headers, expect: [200] }),
        () => ({ method: "GET", path: `/admin/events${query()}`, headers, expect: [200] }),
        () => ({ method: "GET", path: `/admin/events/${path(2 + int(2))}${query()}`, headers, expect: [200, 404] }),
        () => ({ method: "GET", path: `/admin/events/stripe/${pick(Object.values(IDS))}${query()}`, headers, expect: [200] }),
        () => ({ method: "GET", path: `/admin/${pick(["login", "logout", "outbox", "api", "events/x", ""])}${rand() < 0.5 ? `/${path(1)}` : ""}${query()}`, headers, expect: [200, 404] }),
        () => ({ ...otherMethod(), path: pick(["/admin", "/admin/events", `/admin/events/stripe/${IDS.failed}`]), headers, expect: [405] }),
      ])();
    },
    // (d) State-changing posts on real targets without a valid session and
    // its form token from this origin: refused, and nothing changes.
    "forged actions": () => {
      const op = { ...operator, cookie: t.op.cookie, "content-type": FORM };
      const token = (form) => `form_token=${form}`;
      const variants = [
        // No live session, whatever the form carries.
        () => ({ headers: { ...operator, "content-type": FORM }, body: token(t.op.form), expect: [401] }),
        () => ({ headers: { ...op, cookie: junkCookie() }, body: token(t.op.form), expect: [401] }),
        () => ({ headers: { ...op, cookie: t.revoked.cookie }, body: token(t.revoked.form), expect: [401] }),
        () => {
          const stale = forged(pick([Date.now() - 12 * 3600_000 - 60_000, Date.now() + 600_000, 0, -1]));
          return { headers: { ...op, cookie: stale.cookie }, body: token(stale.form), expect: [401] };
        },
        // The operator's session, without its form token.
        () => ({ headers: op, body: pick(["", "form_token=", token(hex(64)), token(t.other.form), token(t.op.form.slice(0, -2)), token(`${t.op.form}00`), `form_tokenx=${t.op.form}`, `FORM_TOKEN=${t.op.form}`, token(text(int(300)))]), expect: [403] }),
        () => ({ path: `${actionPath()}?form_token=${t.op.form}`, headers: op, body: "", expect: [403] }),
        () => ({ headers: { ...op, cookie: t.other.cookie }, body: token(t.op.form), expect: [403] }),
        // The right session and form token, from another site.
        () => ({ headers: { ...op, "sec-fetch-site": pick(["cross-site", "same-site", "none", "SAME-ORIGIN", "same-origin, cross-site", ""]) }, body: token(t.op.form), expect: [403] }),
        () => ({ headers: { ...op, origin: pick(["http://evil.test", "null", "http://127.0.0.1:1", `https://127.0.0.1:${t.port}`, `http://127.0.0.1:${t.port}.evil.test`]) }, body: token(t.op.form), expect: [403] }),
        // Past the form's 1 KiB cap: refused before the token is read.
        () => ({ headers: op, body: `${token(t.op.form)}&pad=${"a".repeat(1024 + int(4096))}`, expect: [413], own: true }),
      ];
      const logout = [
        () => ({ path: "/admin/logout", headers: { ...op, ...pick([{ "sec-fetch-site": "cross-site" }, { origin: "http://evil.test" }]) }, body: "", expect: [403] }),
        () => ({ path: "/admin/logout", headers: { ...op, cookie: junkCookie() }, body: "", expect: [303] }),
      ];
      return { method: "POST", path: actionPath(), ...pick(rand() < 0.9 ? variants : logout)() };
    },
  };
}

/** One request on its own; resolves to { status, headers, body } or { error }. */
function send(agent, port, req) {
  return new Promise((resolve) => {
    // Every body framed, so that a DELETE's is not read as the next request.
    const headers = req.body == null ? req.headers : { ...req.headers, "content-length": Buffer.byteLength(req.body) };
    // Raw paths, not through URL: `..` and `//` must reach the worker as sent.
    // A body refused past a cap closes its connection: one of its own.
    const options = { host: "127.0.0.1", port, path: req.path, method: req.method, headers, agent: req.own ? false : agent };
    let r;
    try {
      r = request(options, (res) => {
        const chunks = [];
        res.on("data", (d) => chunks.push(d));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        res.on("error", (error) => resolve({ error: `response: ${error.code ?? error.message}` }));
      });
    } catch (error) {
      return resolve({ error: `not sent: ${error.code ?? error.message}` });
    }
    let answered = false;
    r.on("response", () => (answered = true));
    r.setTimeout(10_000, () => r.destroy(new Error("no answer in 10 s")));
    // After the answer, the server may close a connection whose body it did not read.
    r.on("error", (error) => answered || resolve({ error: error.code ?? error.message }));
    r.end(req.body ?? undefined);
  });
}

/** Every D1 table, whole, and the targets' inboxes. */
async function snapshot(w, keys) {
  const { results } = await w.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' ORDER BY name").all();
  const state = {};
  for (const { name } of results) {
    const rows = (await w.db.prepare(`SELECT * FROM "${name}"`).all()).results;
    state[name] = rows.map((row) => JSON.stringify(row)).sort();
  }
  for (const key of keys) state[`inbox ${key}`] = await w.inboxState(key);
  return state;
}

/** What differs between two snapshots, one line per table or inbox. */
function changes(before, after) {
  const missing = (rows, from) => rows.filter((row) => !from.includes(row));
  return Object.keys(before)
    .filter((name) => !isDeepStrictEqual(before[name], after[name]))
    .map((name) => {
      const [was, is] = [before[name], after[name]];
      const diff = Array.isArray(was) ? { gone: missing(was, is), added: missing(is, was) } : { was, is };
      return `${name} changed: ${JSON.stringify(diff).slice(0, 300)}`;
    });
}

/** The real targets, two live sessions and a signed-out one. */
async function prepare(w, agent, port) {
  w.target.answer = (call) => (call.body.includes(DEAD_EMAIL) ? 503 : 200);
  const stripe = (body, headers = {}) => w.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), ...headers }).then((r) => r.json());
  await stripe(checkoutCompleted({ id: IDS.done }));
  await stripe(checkoutCompleted({ id: IDS.dead, email: DEAD_EMAIL }));
  for (const id of [IDS.failed, IDS.spare]) await stripe(checkoutCompleted({ id }), { "x-test-fault": "effect-always-fails" });
  const star = starEvent({ repo: "fuzz/admin" });
  await w.post("/webhooks/github", star, githubHeaders(star, "gh_test_secret", { delivery: "afz-star", event: "star" })).then((r) => r.json());
  await eventually(
    async () =>
      (await w.scalar("SELECT count(*) FROM failed_events")) === 2 &&
      (await w.scalar("SELECT count(*) FROM outbox WHERE status = 'dead'")) === 1 &&
      (await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')")) === 0,
    30_000,
    "two failed events, a dead side effect, the rest sent",
  );
  const deadKey = await w.scalar("SELECT idempotency_key FROM outbox WHERE status = 'dead'");
  const signIn = async () => {
    await new Promise((r) => setTimeout(r, 5)); // another issue time, another session
    const login = await send(agent, port, { method: "POST", path: "/admin/login", headers: { "cf-connecting-ip": OPERATOR, "content-type": FORM }, body: `token=${TOKEN}` });
    if (login.status !== 303) throw new Error(`sign-in answered ${login.status ?? login.error}`);
    const cookie = login.headers["set-cookie"][0].split(";")[0];
    const page = await send(agent, port, { method: "GET", path: "/admin", headers: { "cf-connecting-ip": OPERATOR, cookie } });
    const form = /name="form_token" value="([0-9a-f]+)"/.exec(page.body)?.[1];
    const value = cookie.slice("admin_session=".length);
    // The forged sessions below are only worth something if computed alike.
    if (form !== formToken(value) || value !== sessionValue(Number(value.split(".")[0]))) throw new Error("the dashboard's session or form token is not computed as fuzz/admin.mjs assumes");
    return { cookie, form, value };
  };
  const [op, other, revoked] = [await signIn(), await signIn(), await signIn()];
  const out = await send(agent, port, { method: "POST", path: "/admin/logout", headers: { "cf-connecting-ip": OPERATOR, cookie: revoked.cookie, "sec-fetch-site": "same-origin" } });
  if (out.status !== 303) throw new Error(`sign-out answered ${out.status}`);
  return { deadKey, op, other, revoked, port };
}

/** The operator's own actions, from the dashboard: each must do its thing. */
async function legitimate(w, agent, t) {
  const failures = [];
  const post = (path, cookie = t.op.cookie, form = t.op.form) =>
    send(agent, t.port, { method: "POST", path, headers: { "cf-connecting-ip": OPERATOR, cookie, "content-type": FORM, "sec-fetch-site": "same-origin" }, body: `form_token=${form}` });
  const expect = async (what, res, status, location, check) => {
    const at = res.headers?.location ?? "";
    if (res.status !== status || !at.endsWith(location) || !(await check())) failures.push(`${what}: ${res.status ?? res.error} ${at}`);
  };
  await expect("Replay of a failed event", await post(`/admin/events/stripe/${IDS.failed}/replay`), 303, "?done=applied", async () => (await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", IDS.failed)) === 1);
  await expect("Dismiss of a failed event", await post(`/admin/events/stripe/${IDS.spare}/dismiss`), 303, "?done=dismissed", async () => (await w.scalar("SELECT dismissed_at FROM failed_events WHERE event_id = ?", IDS.spare)) !== null);
  await expect("Requeue of a dead side effect", await post(`/admin/outbox/${encodeURIComponent(t.deadKey)}/requeue`), 303, "/admin?done=requeued", async () => (await w.scalar("SELECT status FROM outbox WHERE idempotency_key = ?", t.deadKey)) !== "dead");
  const api = await send(agent, t.port, { method: "GET", path: "/admin/api/stats", headers: { "cf-connecting-ip": OPERATOR, authorization: `Bearer ${TOKEN}` } });
  await expect("the API, from the operator's address", api, 200, "", async () => true);
  await expect("Sign-out", await send(agent, t.port, { method: "POST", path: "/admin/logout", headers: { "cf-connecting-ip": OPERATOR, cookie: t.op.cookie, "sec-fetch-site": "same-origin" } }), 303, "/admin", async () => {
    const page = await send(agent, t.port, { method: "GET", path: "/admin", headers: { "cf-connecting-ip": OPERATOR, cookie: t.op.cookie } });
    return page.status === 401;
  });
  return failures;
}

/** Runs `count` hostile requests; returns the report and the violations. */
export async function runAdminFuzz({ count = 20_000, concurrency = 32, seed = 8, log = console.log } = {}) {
  const w = await startWorker({ ADMIN_TOKEN: TOKEN, STATS_FLUSH_MS: "0", EFFECT_MAX_ATTEMPTS: "1", OUTBOX_MAX_ATTEMPTS: "1", EMAIL_API_URL: "http://email.test" }, { port: 0 });
  const violations = [];
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  try {
    const port = Number(new URL((await w.mf.ready).href).port);
    const t = await prepare(w, agent, port);
    const keys = [...Object.values(IDS).map((id) => `stripe:${id}`), "github:afz-star"];
    // The state must hold still on its own, or a difference would prove nothing.
    const before = await eventually(async () => {
      const first = await snapshot(w, keys);
      await new Promise((r) => setTimeout(r, 1_000));
      return isDeepStrictEqual(first, await snapshot(w, keys)) && first;
    }, 30_000, "the state to settle");
    const missing = keys.filter((key) => before[`inbox ${key}`] === null);
    if (missing.length) throw new Error(`no inbox holds ${missing}`);
    const rows = Object.values(before).filter(Array.isArray);

    const names = Object.keys(generators(prng(seed), t));
    const counts = {};
    let next = 0;
    const started = Date.now();
    const sender = async () => {
      while (next < count) {
        const index = next++;
        const rand = prng(Math.imul(seed, 0x9e3779b1) ^ index);
        const name = process.env.FUZZ_ONLY ?? names[Math.floor(rand() * names.length)];
        const req = generators(rand, t)[name]();
        const res = await send(agent, port, req);
        const outcome = res.error ? `error ${res.error}` : `${res.status}`;
        counts[name] ??= {};
        counts[name][outcome] = (counts[name][outcome] ?? 0) + 1;
        const what = `${name}: ${req.method} ${req.path.slice(0, 160)}`;
        if (res.error) violations.push(`${what}: dropped connection (${res.error})`);
        else if (!req.expect.includes(res.status)) violations.push(`${what}: ${res.status} ${res.body.slice(0, 100)} (expected ${req.expect})`);
        else if (/html/.test(res.headers["content-type"]) && res.body.includes(MARKUP)) violations.push(`${what}: markup from the request in the page`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, sender));
    const seconds = (Date.now() - started) / 1000;

    const changed = changes(before, await snapshot(w, keys));
    violations.push(...changed);
    const done = w.logged("admin_action").filter((line) => !["refused", "too-large"].includes(line.outcome));
    if (done.length) violations.push(`${done.length} actions audited as done, first: ${JSON.stringify(done[0])}`);
    violations.push(...(await legitimate(w, agent, t)));
    const panics = w.logs.filter((line) => /panicked/.test(line));
    if (panics.length) violations.push(`${panics.length} panicked lines, first: ${panics[0].slice(0, 200)}`);

    const statuses = {};
    for (const byStatus of Object.values(counts)) {
      for (const [status, n] of Object.entries(byStatus)) statuses[status] = (statuses[status] ?? 0) + n;
    }
    log(`admin fuzz: ${count} requests in ${seconds.toFixed(1)} s (${Math.round(count / seconds)} requests/s), ${concurrency} in flight, seed ${seed}`);
    log(`by status: ${JSON.stringify(statuses)}`);
    for (const [name, byStatus] of Object.entries(counts)) log(`  ${name}: ${JSON.stringify(byStatus)}`);
    log(`state compared: ${rows.length} D1 tables (${rows.flat().length} rows) and ${keys.length} inboxes, ${changed.length} changed; actions audited as done: ${done.length}; throttled: ${w.logged("admin_throttled").length}; panicked lines: ${panics.length}`);
    log(violations.length ? `FAIL: ${violations.length} violations` : "PASS: no 5xx, no dropped connection, no state change, no panic; the operator's own actions work");
    for (const v of violations.slice(0, 20)) log(`  ${v}`);
    return { violations, statuses, counts, seconds };
  } finally {
    agent.destroy();
    await w.dispose();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const count = Number(process.argv[2] ?? 20_000);
  const seed = Number(process.argv[3] ?? 8);
  const { violations } = await runAdminFuzz({ count, seed });
  process.exit(violations.length ? 1 : 0);
}
