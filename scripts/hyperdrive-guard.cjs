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
 * The accepted socket whose socket to Postgres was just closed before its
 * end: with `sslmode=prefer`, told no TLS, the proxy opens another to the
 * same address in the same tick, which is guarded as the first was.
 */
let replacing = null;
/** The socket to Postgres each accepted socket is piped to now, and its address. */
const piped = new WeakMap();
const targets = new WeakMap();

/** Whether a pair sends at once; a benchmark sets it false, to measure the proxy as it is. */
exports.noDelay = true;

/** The address `net.connect` was given, as `host:port`. */
const target = ([first, second]) => (typeof first === "object" && first ? `${first.host}:${first.port}` : `${second}:${first}`);

const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  const again = replacing && targets.get(replacing) === target(args) ? replacing : null;
  const client = accepted ?? again;
  replacing = null;
  if (client) guard(client, socket, target(args));
  return socket;
};

/** Closes both sockets of a proxied pair on an error of either. */
function guard(client, database, address) {
  const first = !piped.has(client);
  piped.set(client, database);
  targets.set(client, address);
  if (client.destroyed) database.destroy();
  client.setNoDelay(exports.noDelay);
  database.setNoDelay(exports.noDelay);
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
    // Not an error's, nor the end of a stream: the proxy's own close (or
    // TLS's, over it), which only a connect to the same address follows.
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
