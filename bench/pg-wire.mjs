// A counting proxy for the Postgres wire protocol, for `make store-bench`:
// put between the worker's Hyperdrive binding and the database, it passes
// every byte on unchanged and counts, per connection, the round trips (each
// time the client speaks again after the server answered) before and after
// the server is first ready for a query, and the statements the client
// sent: each Parse, and each `;`-separated statement of a simple query.
import net from "node:net";

/** The complete frontend messages in `chunk` and before it: [type, body]. */
function* messages(state, chunk) {
  state.pending = Buffer.concat([state.pending, chunk]);
  for (;;) {
    if (!state.started) {
      if (state.pending.length < 4) return;
      const length = state.pending.readInt32BE(0);
      if (state.pending.length < length) return;
      state.pending = state.pending.subarray(length);
      state.started = true;
      continue;
    }
    if (state.pending.length < 5) return;
    const length = state.pending.readInt32BE(1);
    if (state.pending.length < 1 + length) return;
    const type = String.fromCharCode(state.pending[0]);
    const body = state.pending.subarray(5, 1 + length);
    state.pending = state.pending.subarray(1 + length);
    yield [type, body];
  }
}

/** Backend message types of `chunk` (every backend message is typed). */
function* types(state, chunk) {
  state.pending = Buffer.concat([state.pending, chunk]);
  while (state.pending.length >= 5) {
    const length = state.pending.readInt32BE(1);
    if (state.pending.length < 1 + length) return;
    yield String.fromCharCode(state.pending[0]);
    state.pending = state.pending.subarray(1 + length);
  }
}

/**
 * Listens on a free loopback port, forwarding to `port`. Returns its `port`,
 * `counts()` ({ connections, startupTrips, queryTrips, statements }) and
 * `close()`.
 */
export async function countingProxy(port) {
  const counts = { connections: 0, startupTrips: 0, queryTrips: 0, statements: 0 };
  const server = net.createServer((client) => {
    counts.connections++;
    const upstream = net.connect(port, "127.0.0.1");
    const front = { pending: Buffer.alloc(0), started: false };
    const back = { pending: Buffer.alloc(0) };
    let ready = false;
    let answered = true;
    client.on("data", (chunk) => {
      const sent = [...messages(front, chunk)];
      // Terminate ('X') alone asks for no answer.
      if (answered && !(sent.length > 0 && sent.every(([type]) => type === "X"))) {
        answered = false;
        if (ready) counts.queryTrips++;
        else counts.startupTrips++;
      }
      for (const [type, body] of sent) {
        if (type === "P") counts.statements++;
        if (type === "Q") counts.statements += body.toString("utf8").split(";").filter((s) => s.replace(/\0/g, "").trim()).length;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      answered = true;
      for (const type of types(back, chunk)) if (type === "Z") ready = true;
      client.write(chunk);
    });
    const end = () => (client.destroy(), upstream.destroy());
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: server.address().port,
    counts: () => ({ ...counts }),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
