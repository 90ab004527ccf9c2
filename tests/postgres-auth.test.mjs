// needs: postgres, stripe, demos
// The engine starts its own Postgres connections (crates/engine/src/postgres/
// startup.rs): every other Postgres test goes through the pooler, which
// asks for SCRAM-SHA-256. Here the worker goes straight to the server,
// which asks each role its own way (pg_hba.conf, for this file's roles
// only): SCRAM, MD5, or the password in cleartext. Each must apply an
// event once; a wrong password must be a 503, never a crash.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";
import { SECRETS } from "./support/worker.mjs";

const PASSWORD = "auth-test-password";
const ROLES = { md5: `webhooks_md5_${process.pid}`, password: `webhooks_plain_${process.pid}` };

let pg;
let hba;
let original;
before(() => {
  pg = freshDatabase();
  hba = pg.scalar("SHOW hba_file");
  original = readFileSync(hba, "utf8");
  // First match wins: these lines, for these roles, before initdb's.
  const lines = Object.entries(ROLES).map(([method, role]) => `host all ${role} 127.0.0.1/32 ${method}\n`);
  writeFileSync(hba, lines.join("") + original);
  for (const [method, role] of Object.entries(ROLES)) {
    // An MD5 server asks for MD5 only of a password stored as MD5.
    const stored = method === "md5" ? "md5" : "scram-sha-256";
    pg.query(`SET password_encryption = '${stored}'; CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}'`);
    pg.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
  }
  pg.query("SELECT pg_reload_conf()");
});
after(() => {
  if (original !== undefined) writeFileSync(hba, original);
  pg?.query("SELECT pg_reload_conf()");
  for (const role of Object.values(ROLES)) pg?.query(`DROP OWNED BY ${role}; DROP ROLE IF EXISTS ${role}`);
});

/** The server's own URL (past the pooler), as `role` with `password`. */
function direct(role, password = PASSWORD) {
  const url = new URL(pg.direct);
  if (role) {
    url.username = role;
    url.password = password;
  }
  return { ...pg, url: url.href };
}

/** One new checkout through a worker reaching Postgres as `via`: its reply. */
async function checkout(via) {
  const w = await startPostgresWorker(via, { EMAIL_API_URL: "http://email.test", EMAIL_API_KEY: "k", EMAIL_FROM: "shop@example.com" });
  try {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id, session });
    const reply = await w.post("/webhooks/stripe", body, stripeHeaders(body, SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0]));
    const said = await reply.json();
    const errors = w.logged("effect_failed").map((line) => line.error);
    return { status: reply.status, said, id, session, errors };
  } finally {
    await w.dispose();
  }
}

const applied = ({ id, session }) => ({
  ledger: pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id = '${id}'`),
  orders: pg.scalar(`SELECT count(*) FROM orders WHERE checkout_session_id = '${session}'`),
});

describe("postgres: each way a server asks for the password", () => {
  for (const [how, role] of [
    ["SCRAM-SHA-256 (initdb's method), straight to the server", undefined],
    ["MD5", ROLES.md5],
    ["cleartext", ROLES.password],
  ]) {
    test(`${how}: the event applies once`, async () => {
      const sent = await checkout(direct(role));
      assert.equal(sent.status, 200, JSON.stringify(sent));
      assert.equal(sent.said.outcome, "processed");
      assert.deepEqual(applied(sent), { ledger: "1", orders: "1" });
    });
  }

  for (const [how, role, code] of [
    ["MD5", ROLES.md5, "28P01"],
    ["cleartext", ROLES.password, "28P01"],
  ]) {
    test(`${how}, a wrong password: 503, nothing written`, async () => {
      const sent = await checkout(direct(role, "wrong-password"));
      assert.equal(sent.status, 503);
      assert.equal(sent.said.store, "unavailable");
      assert.match(sent.errors.at(-1), new RegExp(`store unavailable: postgres: .*${code}`));
      assert.deepEqual(applied(sent), { ledger: "0", orders: "0" });
    });
  }
});
