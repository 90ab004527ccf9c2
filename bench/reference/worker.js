// The yardstick (bench/gateway.mjs): the shape of a KV-dedupe webhook
// gateway in a few dozen lines. It verifies a Stripe signature with
// WebCrypto, answers a copy from KV, records a new id in KV, and sends the
// event to a queue, whose consumer counts what it received. KV is
// eventually consistent: two concurrent copies can both pass the get, which
// is why this project does not dedupe this way. Benchmarks only.
const encoder = new TextEncoder();
let consumed = 0;

async function verify(body, header, secret) {
  const parts = Object.fromEntries(header.split(",").map((kv) => kv.split("=")));
  if (!parts.t || !parts.v1 || Math.abs(Date.now() / 1000 - Number(parts.t)) > 300) return false;
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  const signature = new Uint8Array(parts.v1.match(/../g).map((h) => parseInt(h, 16)));
  return crypto.subtle.verify("HMAC", key, signature, encoder.encode(`${parts.t}.${body}`));
}

export default {
  async fetch(request, env) {
    if (request.method === "GET") return Response.json({ consumed });
    const body = await request.text();
    const header = request.headers.get("stripe-signature") ?? "";
    if (!(await verify(body, header, env.STRIPE_WEBHOOK_SECRET))) {
      return Response.json({ error: "bad_signature" }, { status: 401 });
    }
    const { id, type } = JSON.parse(body);
    if (await env.SEEN.get(id)) return Response.json({ outcome: "duplicate" });
    await env.SEEN.put(id, "1", { expirationTtl: 30 * 86400 });
    await env.EVENTS.send({ id, type });
    return Response.json({ outcome: "accepted" });
  },

  async queue(batch) {
    consumed += batch.messages.length;
    batch.ackAll();
  },
};
