// Loaded into wrangler's (or a test's) Node process when effects commit in
// Postgres. wrangler 4.86's local Hyperdrive proxy pipes each connection
// from the worker to Postgres with no error handlers: a database that is
// down (ECONNREFUSED), restarting (ECONNRESET), or a request that ends while
// Postgres still sends (EPIPE) throws, and ends the whole local runtime.
// Here each pair of sockets the proxy makes (an accepted one, and the one
// its handler opens to Postgres at once) gets an error handler that closes
// both, so the worker sees its connection close and answers 503. No other
// socket is touched. Fixed upstream in wrangler 4.87 (workers-sdk #13390),
// which needs Node 22.
// Both sockets of a pair also send at once (TCP_NODELAY): with Nagle's
// algorithm, the proxy held each small write Postgres answered in behind
// the ACK of the one before, and a new event's round trips took about
// 58 ms where they take 10 (BENCHMARKS.md).
// needs: postgres
"use strict";
const net = require("node:net");

let noted = 0;
let accepted = null;
let opened = null;

const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  if (accepted) opened = socket;
  return socket;
};

/** Closes both sockets of a proxied pair on an error of either. */
function guard(client, database) {
  client.setNoDelay(true);
  database.setNoDelay(true);
  const close = (error) => {
    if (noted++ < 3) console.error(`[hyperdrive-guard] the local Hyperdrive proxy's connection: ${error.code ?? error.message}`);
    client.destroy();
    database.destroy();
  };
  client.on("error", close);
  database.on("error", close);
  // What Postgres said last (a FATAL on a shutdown, a refused password)
  // still reaches the worker.
  database.on("close", () => client.end());
}

const createServer = net.createServer;
net.createServer = function (...args) {
  const handler = args.findLast((arg) => typeof arg === "function");
  if (!handler) return createServer.apply(this, args);
  const rest = args.filter((arg) => arg !== handler);
  return createServer.call(this, ...rest, (socket) => {
    accepted = socket;
    opened = null;
    try {
      return handler(socket);
    } finally {
      if (opened) guard(socket, opened);
      accepted = null;
      opened = null;
    }
  });
};
