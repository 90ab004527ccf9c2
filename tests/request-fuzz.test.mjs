// A short run of the request fuzz (fuzz/requests.mjs; `make fuzz` runs
// 100,000): hostile requests at the worker in workerd over loopback sockets.
// needs: stripe, github, demos
import { test } from "node:test";
import assert from "node:assert/strict";

import { runFuzz } from "../fuzz/requests.mjs";

test("3,000 hostile requests: no 5xx, no dropped connection, no stray write, no panic", async () => {
  const lines = [];
  const { violations, statuses } = await runFuzz({ count: 3_000, log: (line) => lines.push(line) });
  assert.deepEqual(violations, [], lines.join("\n"));
  for (const status of ["400", "401", "404", "405", "413"]) {
    assert.ok(statuses[status] > 0, `no ${status} in ${JSON.stringify(statuses)}: a category did not run`);
  }
});
