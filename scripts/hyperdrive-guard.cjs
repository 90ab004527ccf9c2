// Loaded into wrangler's (or a test's) Node process when effects commit in
// Postgres (`node --require`). wrangler 4.86's local Hyperdrive proxy pipes
// each connection from the worker to Postgres with no error handlers: a
// database that is down (ECONNREFUSED), restarting (ECONNRESET), or a
// request that ends while Postgres still sends (EPIPE) throws, and ends the
// whole local runtime. Here each socket the proxy makes or accepts gets an
// error handler that closes its pair, so the worker sees its connection
// close at once and answers 503. Fixed upstream in wrangler 4.87
// (workers-sdk #13390), which needs Node 22.
"use strict";
const net = require("node:net");

let noted = 0;
let accepting = null;
const closeBoth = (socket) => (error) => {
  if (noted++ < 3) console.error(`[hyperdrive-guard] local Hyperdrive proxy socket: ${error.code ?? error.message}`);
  socket.destroy();
  socket.peer?.destroy();
};

// The proxy connects to Postgres from inside its connection handler.
const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  socket.on("error", closeBoth(socket));
  if (accepting) {
    socket.peer = accepting;
    accepting.peer = socket;
    socket.on("close", () => socket.peer.destroy());
  }
  return socket;
};

const createServer = net.createServer;
net.createServer = function (...args) {
  const handler = args.findLast((arg) => typeof arg === "function");
  if (!handler) return createServer.apply(this, args);
  const rest = args.filter((arg) => arg !== handler);
  return createServer.call(this, ...rest, (socket) => {
    socket.on("error", closeBoth(socket));
    accepting = socket;
    try {
      return handler(socket);
    } finally {
      accepting = null;
    }
  });
};
