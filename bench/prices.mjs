// Cloudflare's published Workers Paid prices (Standard usage model), for
// bench/costs.mjs: what each unit beyond the plan's monthly included amounts
// costs. The plan is $5 a month and includes 10 M Worker requests, 30 M CPU
// ms, 1 M Durable Object requests, 400,000 GB-s, 25 billion rows read and
// 50 M rows written (each, Durable Object SQL and D1), 1 M Queue operations,
// 10 M KV reads and 1 M KV writes.
export const SOURCES = {
  date: "as published on 2026-12-01 (the pages show no last-updated date)",
  pages: [
    "https://developers.cloudflare.com/workers/platform/pricing/",
    "https://developers.cloudflare.com/durable-objects/platform/pricing/",
    "https://developers.cloudflare.com/d1/platform/pricing/",
    "https://developers.cloudflare.com/queues/platform/pricing/",
    "https://developers.cloudflare.com/kv/platform/pricing/",
  ],
};

// Durable Object requests include alarm invocations; each setAlarm() is a
// row written, and so is each row deleted. A Queue message is 3 operations
// (write, read, delete) per 64 KB, and each retry one more read. The pages
// do not say whether a queue consumer's or a cron trigger's invocation is a
// Worker request: they are counted as one here.
export const PRICES = {
  workerRequest: 0.3 / 1e6,
  workerCpuMs: 0.02 / 1e6,
  doRequest: 0.15 / 1e6,
  doGbS: 12.5 / 1e6,
  doRowRead: 0.001 / 1e6,
  doRowWritten: 1.0 / 1e6,
  d1RowRead: 0.001 / 1e6,
  d1RowWritten: 1.0 / 1e6,
  queueOp: 0.4 / 1e6,
  kvRead: 0.5 / 1e6,
  kvWrite: 5.0 / 1e6,
};

/** What the $5 plan includes each month, by the same keys as PRICES. */
export const INCLUDED = {
  workerRequest: 10e6,
  workerCpuMs: 30e6,
  doRequest: 1e6,
  doGbS: 400_000,
  doRowRead: 25e9,
  doRowWritten: 50e6,
  d1RowRead: 25e9,
  d1RowWritten: 50e6,
  queueOp: 1e6,
  kvRead: 10e6,
  kvWrite: 1e6,
};

/**
 * Each line's units and dollars at the marginal price, and the month's
 * bill when these are all the account's usage: $5 plus what exceeds the
 * included amounts.
 */
function bill(items) {
  const lines = {};
  let total = 0;
  let month = 5;
  for (const [name, units, key] of items) {
    const dollars = units * PRICES[key];
    total += dollars;
    month += Math.max(0, units - INCLUDED[key]) * PRICES[key];
    lines[name] = { units: Math.round(units), "$ per million events": +dollars.toFixed(3) };
  }
  return { lines, total, month };
}

/** The bill for `usage` (bench/costs.mjs's columns, summed). */
export function price(usage) {
  return bill([
    ["Worker requests", usage.workerRequests, "workerRequest"],
    ["Worker CPU ms (all of workerd's, an upper bound)", usage.cpuMs, "workerCpuMs"],
    ["Durable Object requests", usage.doRequests, "doRequest"],
    ["Durable Object GB-s", usage.doGbS, "doGbS"],
    ["Durable Object rows read", usage.doSqlRowsRead, "doRowRead"],
    ["Durable Object rows written", usage.doSqlRowsWritten, "doRowWritten"],
    ["D1 rows read", usage.d1RowsRead, "d1RowRead"],
    ["D1 rows written", usage.d1RowsWritten, "d1RowWritten"],
    ["Queue operations", usage.queueOps, "queueOp"],
  ]);
}

/**
 * A gateway that checks KV and queues: per delivery a Worker request and a
 * KV read; per new event a KV write and a Queue message (written, read,
 * deleted) and the consumer's share of a Worker invocation.
 */
export function gateway(events, duplicates) {
  const deliveries = events * (1 + duplicates);
  return bill([
    ["Worker requests", deliveries + events / 10, "workerRequest"],
    ["KV reads", deliveries, "kvRead"],
    ["KV writes", events, "kvWrite"],
    ["Queue operations", 3 * events, "queueOp"],
  ]);
}
