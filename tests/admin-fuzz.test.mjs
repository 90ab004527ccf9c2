// A short run of the admin fuzz (fuzz/admin.mjs; `make fuzz` runs 20,000):
// hostile requests at the admin API and the dashboard, over loopback sockets.
// needs: stripe, github, demos, dashboard
import { test } from "node:test";
import assert from "node:assert/strict";

import { runAdminFuzz } from "../fuzz/admin.mjs";

test("2,000 hostile admin requests: no 5xx, no dropped connection, no state change, no panic", async () => {
  const lines = [];
  const { violations, statuses } = await runAdminFuzz({ count: 2_000, log: (line) => lines.push(line) });
  assert.deepEqual(violations, [], lines.join("\n"));
  // Served, signed out, refused without credentials, forged and throttled.
  for (const status of ["200", "303", "401", "403", "404", "405", "413", "429"]) {
    assert.ok(statuses[status] > 0, `no ${status} in ${JSON.stringify(statuses)}: a category did not run`);
  }
});
