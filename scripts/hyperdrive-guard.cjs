// Loaded into wrangler's (or a test's) Node process when effects commit in
// Postgres. wrangler 4.86's local Hyperdrive proxy pipes each connection
// from the worker to Postgres with no error handlers: a database that is
// down (ECONNREFUSED), restarting (ECONNRESET), or a request that ends while
// Postgres still sends (EPIPE) throws, and ends the whole local runtime.
// Here each pair of sockets the proxy makes (an accepted one, and the one
// its handler opens to Postgres at once) gets an error handler that closes
// both, so the worker sees its connection close and answers 503. Only a
// socket a server's handler opens is touched (the proxy's are the only
// ones in `make dev`). Fixed upstream in wrangler 4.87 (workers-sdk
// #13390), which needs Node 22.
// Both sockets of a pair also send at once (TCP_NODELAY): with Nagle's
// algorithm, as the proxy leaves them, each new event waited about 40 ms
// more for Postgres's small answers (the template's BENCHMARKS.md).
// needs: postgres
"use strict";
const net = require("node:net");

let noted = 0;
let accepted = null;
/**
 * The accepted socket whose socket to Postgres the proxy has just closed
 * before reading from it: with `sslmode=prefer`, told no TLS, it opens
 * another in the same tick, which is guarded as the first was.
 */
let replacing = null;
/** The socket to Postgres each accepted socket is piped to now. */
const piped = new WeakMap();

const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  const client = accepted ?? replacing;
  replacing = null;
  if (client) guard(client, socket);
  return socket;
};

/** Closes both sockets of a proxied pair on an error of either. */
function guard(client, database) {
  const first = !piped.has(client);
  piped.set(client, database);
  if (client.destroyed) database.destroy();
  client.setNoDelay(true);
  database.setNoDelay(true);
  const close = (error) => {
    if (noted++ < 3) console.error(`[hyperdrive-guard] the local Hyperdrive proxy's connection: ${error.code ?? error.message}`);
    client.destroy();
    piped.get(client)?.destroy();
  };
  if (first) {
    client.on("error", close);
    client.once("close", () => piped.get(client)?.destroy());
  }
  database.on("error", (error) => (piped.get(client) === database ? close(error) : database.destroy()));
  // What Postgres said last (a FATAL on a shutdown, a refused password)
  // still reaches the worker; a socket the proxy replaced ends nothing.
  database.on("close", () => {
    if (piped.get(client) === database) client.end();
  });
  const destroy = database.destroy;
  database.destroy = function (...args) {
    // The proxy's own close, never an error's, nor the end of a stream.
    const replaced = args.length === 0 && !database.readableEnded && !client.destroyed;
    if (replaced && piped.get(client) === database) {
      replacing = client;
      queueMicrotask(() => {
        if (replacing === client) replacing = null;
      });
    }
    return destroy.apply(this, args);
  };
}

const createServer = net.createServer;
net.createServer = function (...args) {
  const handler = args.findLast((arg) => typeof arg === "function");
  if (!handler) return createServer.apply(this, args);
  const rest = args.filter((arg) => arg !== handler);
  return createServer.call(this, ...rest, function (socket) {
    accepted = socket;
    try {
      return handler.call(this, socket);
    } finally {
      accepted = null;
    }
  });
};
