// The built worker (build/index.js) with a meter around it, for
// bench/costs.mjs only: it counts the operations Cloudflare bills as the
// worker makes them, and never changes what the worker does. Nothing here
// is deployed.
//
// Counted where they happen:
//   worker invocations      the fetch, queue and scheduled handlers
//   Durable Object requests the inbox's fetch and alarm handlers, and the
//                           object's active wall time (duration billing)
//   Durable Object SQL      rowsRead / rowsWritten of every cursor it opens
//                           (a query of several statements is run one
//                           statement at a time, as workerd runs it: its
//                           cursor reports the last statement's rows only);
//                           each setAlarm() (billed as a row written); the
//                           rows a deleteAll() removes (deletes are writes)
//   D1                      rows_read / rows_written / duration of each
//                           statement's meta
//   Queue operations        messages sent (writes), delivered to the consumer
//                           (reads) and acknowledged (deletes)
// GET /__meter answers the totals so far and resets them.
//
// D1's first() and raw() return no meta, so they are run through all()
// here: the same statement, once. Two differences the worker never meets:
// first(column) gives undefined, not an error, for a column that is not
// there, and raw() keeps one of two columns of the same name.
import Worker, { EventInbox as Inbox } from "../build/index.js";

const zero = () => ({
  workerFetch: 0,
  workerQueue: 0,
  workerScheduled: 0,
  doRequests: 0,
  doAlarms: 0,
  doActiveMs: 0,
  doSqlRowsRead: 0,
  doSqlRowsWritten: 0,
  doSetAlarms: 0,
  doDeletedRows: 0,
  d1Statements: 0,
  d1Ms: 0,
  d1RowsRead: 0,
  d1RowsWritten: 0,
  queueWrites: 0,
  queueReads: 0,
  queueDeletes: 0,
  queueRetries: 0,
});
let meter = zero();
// Cursors are counted once read to the end: their totals grow as rows are read.
let cursors = [];

function d1Meta(result) {
  meter.d1Statements++;
  // How long D1 took to run it: the database runs one query at a time.
  meter.d1Ms += result?.meta?.duration ?? 0;
  meter.d1RowsRead += result?.meta?.rows_read ?? 0;
  meter.d1RowsWritten += result?.meta?.rows_written ?? 0;
}

const patched = new WeakSet();
function patch(proto, name, wrap) {
  const original = proto[name];
  proto[name] = wrap(original);
}

/** The prototype of `object` the first time it is seen, to patch; null after. */
function unpatched(object) {
  const proto = Object.getPrototypeOf(object);
  if (patched.has(proto)) return null;
  patched.add(proto);
  return proto;
}

/** Counts each call of `proto[name]` in `meter[key]`. */
function counted(proto, name, key) {
  patch(proto, name, (original) => function (...args) {
    meter[key]++;
    return original.apply(this, args);
  });
}

/** Wraps D1's statement and database classes the first time a DB is seen. */
function meterD1(db) {
  const dbProto = unpatched(db);
  if (!dbProto) return;
  const statementProto = Object.getPrototypeOf(db.prepare("SELECT 1"));
  const all = statementProto.all;
  patch(statementProto, "all", () => async function () {
    const result = await all.call(this);
    d1Meta(result);
    return result;
  });
  patch(statementProto, "run", (run) => async function () {
    const result = await run.call(this);
    d1Meta(result);
    return result;
  });
  // first() and raw() return rows without meta: read the same rows through
  // all() instead, which runs the same statement once.
  patch(statementProto, "first", () => async function (column) {
    const result = await all.call(this);
    d1Meta(result);
    const row = result.results[0];
    if (row === undefined) return null;
    return column === undefined ? row : row[column];
  });
  patch(statementProto, "raw", () => async function () {
    const result = await all.call(this);
    d1Meta(result);
    return result.results.map((row) => Object.values(row));
  });
  patch(dbProto, "batch", (batch) => async function (statements) {
    const results = await batch.call(this, statements);
    for (const result of results) d1Meta(result);
    return results;
  });
}

function meterQueue(queue) {
  const proto = unpatched(queue);
  if (!proto) return;
  counted(proto, "send", "queueWrites");
  patch(proto, "sendBatch", (sendBatch) => function (messages, ...rest) {
    meter.queueWrites += messages.length;
    return sendBatch.call(this, messages, ...rest);
  });
}

// SqlStorage's own exec, for the meter's own counting queries.
let exec;

function meterSql(sql) {
  const proto = unpatched(sql);
  if (!proto) return;
  exec = proto.exec;
  patch(proto, "exec", () => function (query, ...bindings) {
    // The inbox joins a table's creation to the insert that needs it with
    // ";\n"; the bindings belong to the last statement.
    const statements = query.split(";\n");
    const last = statements.pop();
    for (const statement of statements) {
      const earlier = exec.call(this, statement);
      earlier.toArray();
      cursors.push(earlier);
    }
    const cursor = exec.call(this, last, ...bindings);
    cursors.push(cursor);
    return cursor;
  });
}

/** setAlarm() calls, and the rows deleteAll() removes (counted before it runs). */
function meterStorage(storage) {
  const proto = unpatched(storage);
  if (!proto) return;
  counted(proto, "setAlarm", "doSetAlarms");
  patch(proto, "deleteAll", (deleteAll) => function (...args) {
    const tables = [...exec.call(this.sql, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'")];
    for (const { name } of tables) meter.doDeletedRows += exec.call(this.sql, `SELECT count(*) AS n FROM "${name}"`).one().n;
    return deleteAll.apply(this, args);
  });
}

function meterEnv(env) {
  meterD1(env.DB);
  meterQueue(env.OUTBOX);
  return env;
}

function totals() {
  for (const cursor of cursors) {
    meter.doSqlRowsRead += cursor.rowsRead;
    meter.doSqlRowsWritten += cursor.rowsWritten;
  }
  cursors = [];
  const out = meter;
  meter = zero();
  return out;
}

// The built entrypoint's handlers, called with the environment they expect.
const worker = Worker.prototype;

function meterMessages(messages) {
  const proto = messages.length > 0 && unpatched(messages[0]);
  if (!proto) return;
  counted(proto, "ack", "queueDeletes");
  counted(proto, "retry", "queueRetries");
}

export default {
  fetch(request, env, ctx) {
    if (new URL(request.url).pathname === "/__meter") return Response.json(totals());
    meter.workerFetch++;
    return worker.fetch.call({ env: meterEnv(env), ctx }, request);
  },
  queue(batch, env, ctx) {
    meter.workerQueue++;
    meter.queueReads += batch.messages.length;
    meterMessages(batch.messages);
    return worker.queue.call({ env: meterEnv(env), ctx }, batch);
  },
  scheduled(controller, env, ctx) {
    meter.workerScheduled++;
    return worker.scheduled.call({ env: meterEnv(env), ctx }, controller);
  },
};

/** The inbox, with its requests, alarms, SQL and active time counted. */
export class EventInbox {
  constructor(ctx, env) {
    meterSql(ctx.storage.sql);
    meterStorage(ctx.storage);
    this.inner = new Inbox(ctx, meterEnv(env));
    this.active = 0;
    this.since = 0;
  }
  async #timed(work) {
    if (this.active++ === 0) this.since = Date.now();
    try {
      return await work();
    } finally {
      if (--this.active === 0) meter.doActiveMs += Date.now() - this.since;
    }
  }
  fetch(request) {
    meter.doRequests++;
    return this.#timed(() => this.inner.fetch(request));
  }
  alarm(info) {
    meter.doAlarms++;
    return this.#timed(() => this.inner.alarm(info));
  }
}
