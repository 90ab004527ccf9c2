// needs: postgres, stripe, demos
// The engine starts its own Postgres connections (crates/engine/src/postgres/
// startup.rs): every other Postgres test goes through the pooler, which
// asks for SCRAM-SHA-256. Here the worker goes straight to the server,
// which asks each role its own way: SCRAM (initdb's), or, by lines this
// file puts in the test cluster's pg_hba.conf for roles of its own, MD5
// or the password in cleartext. Each must apply an event once; a wrong
// password must be a 503 with nothing written, never a crash.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";
import { SECRETS } from "./support/worker.mjs";

const PASSWORD = "auth-test-password";
const ROLES = { md5: `webhooks_md5_${process.pid}`, password: `webhooks_plain_${process.pid}` };
// This file's pg_hba.conf lines and roles, whichever run made them.
const OURS = /^webhooks_(md5|plain)_(\d+)$/;
/** The role a pg_hba.conf line names (`host all <role> …`). */
const roleOf = (line) => line.split(/\s+/)[2] ?? "";
// Each way, and the role the server asks it of (none: the cluster's own).
const WAYS = [
  ["SCRAM-SHA-256 (initdb's method)", undefined],
  ["MD5", ROLES.md5],
  ["cleartext", ROLES.password],
];

let pg;
let hba;
before(async () => {
  pg = freshDatabase();
  hba = pg.scalar("SHOW hba_file");
  // What an interrupted run left (its process gone) goes first.
  const alive = (pid) => {
    try {
      return process.kill(Number(pid), 0);
    } catch {
      return false;
    }
  };
  for (const [role] of pg.query("SELECT rolname FROM pg_roles WHERE rolname ~ '^webhooks_(md5|plain)_[0-9]+$'")) {
    if (!alive(role.match(OURS)[2])) pg.query(`DROP ROLE ${role}`);
  }
  const kept = readFileSync(hba, "utf8")
    .split("\n")
    .filter((line) => !OURS.test(roleOf(line)) || alive(roleOf(line).match(OURS)[2]));
  // First match wins: these lines, for these roles, before initdb's. Each
  // password is stored as MD5, which initdb's SCRAM-only line refuses:
  // only this file's line for the role lets it in.
  const lines = Object.entries(ROLES).map(([method, role]) => `host all ${role} 127.0.0.1/32 ${method}`);
  writeFileSync(hba, [...lines, ...kept].join("\n"));
  for (const role of Object.values(ROLES)) {
    // A member of the owner of the tables, so that dropping it drops all.
    pg.query(`SET password_encryption = 'md5'; CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${new URL(pg.direct).username}`);
  }
  pg.query("SELECT pg_reload_conf()");
  // The server rereads the file when it gets the signal, just after.
  await sleep(500);
});
after(() => {
  if (hba) writeFileSync(hba, readFileSync(hba, "utf8").split("\n").filter((line) => !Object.values(ROLES).includes(roleOf(line))).join("\n"));
  pg?.query("SELECT pg_reload_conf()");
  for (const role of Object.values(ROLES)) pg?.query(`DROP ROLE IF EXISTS ${role}`);
});

/** The server's own URL (past the pooler), as `role` (else its own) with `password`. */
function direct(role, password = PASSWORD) {
  const url = new URL(pg.direct);
  if (role) url.username = role;
  if (role || password !== PASSWORD) url.password = password;
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
  for (const [how, role] of WAYS) {
    test(`${how}, straight to the server: the event applies once`, async () => {
      const sent = await checkout(direct(role));
      assert.equal(sent.status, 200, JSON.stringify(sent));
      assert.equal(sent.said.outcome, "processed");
      assert.deepEqual(applied(sent), { ledger: "1", orders: "1" });
    });
  }

  for (const [how, role] of WAYS) {
    test(`${how}, a wrong password: 503, nothing written`, async () => {
      const sent = await checkout(direct(role, "wrong-password"));
      assert.equal(sent.status, 503);
      assert.equal(sent.said.store, "unavailable");
      assert.match(sent.errors.at(-1), /store unavailable: postgres: .*28P01/);
      assert.deepEqual(applied(sent), { ledger: "0", orders: "0" });
    });
  }
});
