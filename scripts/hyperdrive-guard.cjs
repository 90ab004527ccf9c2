// Loaded into wrangler's (or a test's) Node process when effects commit in
// Postgres. wrangler 4.86's local Hyperdrive proxy pipes each connection
// from the worker to Postgres with no error handlers: a database that is
// down (ECONNREFUSED), restarting (ECONNRESET), or a request that ends while
// Postgres still sends (EPIPE) throws, and ends the whole local runtime.
// Here each socket the proxy's handler opens to Postgres, and the worker's
// socket it serves, get an error handler that closes both, so the worker
// sees its connection close and answers 503. No other socket is touched.
// Fixed upstream in wrangler 4.87 (workers-sdk #13390), which needs Node 22.
// Both sockets also send at once (TCP_NODELAY): with Nagle's algorithm, as
// the proxy leaves them, each new event waited about 40 ms more for
// Postgres's small answers (the template's BENCHMARKS.md).
// needs: postgres
"use strict";
const net = require("node:net");
const { AsyncLocalStorage } = require("node:async_hooks");

let noted = 0;
/** The worker's socket whose handler runs, through the handler's awaits. */
const serving = new AsyncLocalStorage();
/**
 * The socket to Postgres each worker's socket is piped to now: with
 * `sslmode=prefer` the proxy asks Postgres for TLS on one, and on a "no"
 * closes it and opens another.
 */
const piped = new WeakMap();

const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  const client = serving.getStore();
  if (client) guard(client, socket);
  return socket;
};

/** Closes both sockets of a proxied pair on an error of either. */
function guard(client, database) {
  const first = !piped.has(client);
  piped.set(client, database);
  client.setNoDelay(true);
  database.setNoDelay(true);
  const close = (error) => {
    if (noted++ < 3) console.error(`[hyperdrive-guard] the local Hyperdrive proxy's connection: ${error.code ?? error.message}`);
    client.destroy();
    piped.get(client)?.destroy();
  };
  if (first) client.on("error", close);
  database.on("error", (error) => (piped.get(client) === database ? close(error) : database.destroy()));
  // What Postgres said last (a FATAL on a shutdown, a refused password)
  // still reaches the worker; a socket the proxy replaced ends nothing.
  database.on("close", () => {
    if (piped.get(client) === database) client.end();
  });
}

const createServer = net.createServer;
net.createServer = function (...args) {
  const handler = args.findLast((arg) => typeof arg === "function");
  if (!handler) return createServer.apply(this, args);
  const rest = args.filter((arg) => arg !== handler);
  return createServer.call(this, ...rest, (socket) => serving.run(socket, () => handler(socket)));
};
