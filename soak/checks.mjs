// The crash soak's checks (soak/run.mjs): what must hold once the run has
// settled, and the table of what it measured.
import { d1Query } from "../tests/support/dev.mjs";

/** The violations found, and the measures, of a settled run `r`. */
export function check(r) {
  const {
    persistTo, events, distinct, answered, firstSuccess, repeats, kills, unanswered, inboxStates, runtimeLog,
    stats, KILLS, drainKillMissed, sink, outbox, DELIVERIES, STORMS, STORM_COPIES, sendSeconds, settleSeconds,
    forwardsTo, storeRows, postgres,
  } = r;
  const violations = [];
  const fail = (what) => violations.push(what);

  // The store's ledger and effects: D1's, or Postgres's.
  const ledger = storeRows("SELECT source, event_id FROM processed_events");
  const ledgerKeys = new Set(ledger.map((r) => `${r.source}:${r.event_id}`));
  const missing = events.filter((e) => !ledgerKeys.has(`${e.source}:${e.id}`));
  if (missing.length) fail(`${missing.length} events sent have no ledger row, e.g. ${missing[0].source}:${missing[0].id}`);
  if (ledger.length !== distinct) fail(`${ledger.length} ledger rows for ${distinct} distinct events`);
  const lostAcks = [...answered].filter((k) => !ledgerKeys.has(k)).length;
  if (lostAcks) fail(`${lostAcks} events answered 2xx have no ledger row`);

  const checkouts = events.filter((e) => e.source === "stripe");
  const stars = events.filter((e) => e.source === "github");
  const orders = storeRows("SELECT checkout_session_id, status FROM orders");
  const sessions = new Set(checkouts.map((e) => e.session));
  if (orders.length !== checkouts.length || orders.some((o) => !sessions.has(o.checkout_session_id) || o.status !== "paid"))
    fail(`${orders.length} paid orders for ${checkouts.length} checkouts`);
  const expectedStars = new Map();
  for (const e of stars) expectedStars.set(e.repo, (expectedStars.get(e.repo) ?? 0) + 1);
  let doubleEffects = 0;
  const counted = new Map(storeRows("SELECT repo, stars FROM repo_stars").map((r) => [r.repo, Number(r.stars)]));
  for (const repo of new Set([...expectedStars.keys(), ...counted.keys()])) {
    const [n, want] = [counted.get(repo) ?? 0, expectedStars.get(repo) ?? 0];
    if (n > want) doubleEffects += n - want;
    if (n !== want) fail(`repo ${repo}: ${n} stars counted, ${want} distinct star events`);
  }

  const rows = d1Query(persistTo, "SELECT idempotency_key, action, status FROM outbox");
  const notSent = rows.filter((r) => r.status !== "sent");
  if (notSent.length) fail(`${notSent.length} outbox rows not sent: ${JSON.stringify(countBy(notSent, (r) => r.status))}`);
  if (rows.length !== distinct) fail(`${rows.length} outbox rows for ${distinct} events with one side effect each`);
  const forwards = d1Query(persistTo, "SELECT delivery_id, source, event_id, destination, status FROM forwards");
  const pairs = events.reduce((n, e) => n + forwardsTo[e.source].length, 0);
  if (forwards.length !== pairs) fail(`${forwards.length} deliveries for ${pairs} (event, destination) pairs`);
  const undelivered = forwards.filter((f) => f.status !== "delivered");
  if (undelivered.length) fail(`${undelivered.length} deliveries not delivered: ${JSON.stringify(countBy(undelivered, (f) => f.status))}`);
  const notAtSink = forwards.filter((f) => !firstSuccess.has(f.delivery_id)).length;
  if (notAtSink) fail(`${notAtSink} webhook-ids never succeeded at the sink`);
  const rowKeys = new Set([...rows.map((r) => r.idempotency_key), ...forwards.map((f) => f.delivery_id)]);
  const neverSucceeded = rows.filter((r) => !firstSuccess.has(r.idempotency_key)).length;
  if (neverSucceeded) fail(`${neverSucceeded} side-effect keys never succeeded at the sink`);
  const strangers = [...firstSuccess.keys()].filter((k) => !rowKeys.has(k)).length;
  if (strangers) fail(`${strangers} keys succeeded at the sink with no outbox or forwards row`);
  // A repeat is a crash between the call and `sent` only if the key's row was
  // `sending` at a kill between its first success and the repeat, and each
  // such kill explains one repeat.
  const explained = new Map();
  const unexplained = repeats.filter((r) => {
    const kill = kills.find(
      (k, i) => k.sending.has(r.key) && r.first <= k.end && k.start <= r.at && !explained.has(`${i}:${r.key}`),
    );
    if (kill) explained.set(`${kills.indexOf(kill)}:${r.key}`, true);
    return !kill;
  }).length;
  if (unexplained) fail(`${unexplained} calls repeated a key that had succeeded, not explained by a kill`);
  if (unanswered) fail(`${unanswered} deliveries never answered 2xx`);

  const stuck = countBy([...inboxStates.values()].filter((s) => s !== "done"), (s) => s);
  if (Object.keys(stuck).length) fail(`inboxes not done: ${JSON.stringify(stuck)}`);
  if (inboxStates.size < events.length) fail(`${events.length - inboxStates.size} inboxes never checked: the outbox never settled`);
  const panics = runtimeLog.join("").split("\n").filter((l) => /panicked/.test(l)).length;
  if (panics) fail(`${panics} "panicked" lines in the runtime's log`);
  if (stats.refused.length) fail(`${stats.refused.length} deliveries refused, e.g. ${stats.refused[0]}`);
  if (kills.length < KILLS) fail(`${kills.length} kills, ${KILLS} planned`);
  if (drainKillMissed) fail("no call to the sink was in flight at the drain kill");
  if (postgres) {
    if (postgres.restarts.length < 2) fail(`${postgres.restarts.length} Postgres restarts, 2 planned`);
    if (postgres.waiting) fail(`${postgres.waiting} rows never handed off from Postgres to D1`);
    if (postgres.mirrored !== distinct) fail(`${postgres.mirrored} ledger rows copied to D1 for ${distinct} events`);
  }

  const calls = sink.calls.length;
  const failedCalls = sink.calls.filter((c) => c.status === 500).length;
  const repeatedKeys = new Set(repeats.map((r) => r.key)).size;
  const table = [
    ["deliveries (first sends)", DELIVERIES],
    ["distinct events (Stripe / GitHub)", `${distinct} (${checkouts.length} / ${stars.length})`],
    ["duplicate copies (in 50-way storms)", `${DELIVERIES - distinct} (${STORMS * (STORM_COPIES - 1)})`],
    ["kills (SIGKILL of runtime) / rows sending at them", `${kills.length} / ${kills.reduce((n, k) => n + k.sending.size, 0)}`],
    ["deliveries with no reply / resends", `${stats.noReply} / ${stats.resends}`],
    ["replies", [...stats.statuses].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} x${v}`).join(", ")],
    ["ledger rows / events", `${ledger.length} / ${distinct}`],
    ["double effects", doubleEffects],
    ["lost acks", lostAcks],
    ["side-effect keys / succeeded once", `${rows.length} / ${rows.length - neverSucceeded}`],
    ["forwarded (event, destination) pairs / delivered", `${forwards.length} / ${forwards.length - undelivered.length}`],
    ["sink calls (500s / repeats after success)", `${calls} (${failedCalls} / ${repeats.length})`],
    ["keys called again after success (max per key)", `${repeatedKeys} (${maxPerKey(repeats)})`],
    [
      "left received / pending / sending",
      `${inboxStates.size < events.length ? "unchecked" : stuck.received ?? 0} / ${outbox.pending ?? 0} / ${outbox.sending ?? 0}`,
    ],
    ...(postgres
      ? [["Postgres restarts (immediate) / rows left to hand off / ledger rows in D1", `${postgres.restarts.length} / ${postgres.waiting} / ${postgres.mirrored}`]]
      : []),
    ["send phase", `${sendSeconds.toFixed(0)} s (${(stats.sent / sendSeconds).toFixed(0)} deliveries/s)`],
    ["time to settle after the last kill", `${settleSeconds.toFixed(0)} s`],
  ];
  return { violations, table };
}

function countBy(items, key) {
  const out = {};
  for (const item of items) out[key(item)] = (out[key(item)] ?? 0) + 1;
  return out;
}
function maxPerKey(list) {
  const per = countBy(list, (r) => r.key);
  return Math.max(0, ...Object.values(per));
}
