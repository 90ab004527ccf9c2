// The Stripe + GitHub build without the admin surface (`make build-minimal`
// puts it in target/variants/): what it builds in works end to end, and what
// it leaves out answers clearly. The full build's tests are the rest of
// tests/.
// needs: everything
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";
import { SECRETS, startWorker } from "./support/worker.mjs";

const MINIMAL = "target/variants/stripe,github/index.js";

describe("the Stripe + GitHub build", { skip: !existsSync(MINIMAL) && "not built: run make build-minimal" }, () => {
  let w;
  before(async () => {
    w = await startWorker(
      {
        SOURCES: { stripe: { provider: "stripe" }, github: { provider: "github" }, shop: { provider: "shopify" } },
        SHOP_WEBHOOK_SECRET: "shpss_minimal_build_secret",
        ADMIN_TOKEN: "minimal-build-admin-token-0123456789",
      },
      { main: MINIMAL },
    );
  });
  after(() => w?.dispose());

  test("applies a Stripe and a GitHub event once each, however many copies", async () => {
    const secret = SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0].trim();
    const checkout = checkoutCompleted();
    const stripe = await Promise.all(
      Array.from({ length: 5 }, () => w.post("/webhooks/stripe", checkout, stripeHeaders(checkout, secret))),
    );
    const outcomes = await Promise.all(stripe.map(async (res) => (await res.json()).outcome));
    assert.deepEqual(outcomes.sort(), ["duplicate", "duplicate", "duplicate", "duplicate", "processed"]);
    const star = starEvent({ repo: "octo/minimal" });
    const headers = githubHeaders(star, SECRETS.GITHUB_WEBHOOK_SECRET, { delivery: uniqueId("d"), event: "star" });
    assert.equal((await (await w.post("/webhooks/github", star, headers)).json()).outcome, "processed");
    assert.equal((await (await w.post("/webhooks/github", star, headers)).json()).outcome, "duplicate");
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", JSON.parse(checkout).data.object.id), 1);
    assert.equal(await w.scalar("SELECT stars FROM repo_stars WHERE repo = ?", "octo/minimal"), 1);
  });

  test("a source whose provider is not built in is a 500 misconfigured naming the feature", async () => {
    const res = await w.post("/webhooks/shop", "{}", { "x-shopify-hmac-sha256": "AAAA", "x-shopify-webhook-id": "w1" });
    assert.deepEqual({ status: res.status, body: await res.json() }, { status: 500, body: { error: "misconfigured" } });
    const line = w.logged("delivery").find((l) => l.source === "shop");
    assert.match(line.detail, /`shopify` cargo feature/);
  });

  test("has no admin API and no dashboard", async () => {
    for (const path of ["/admin/api/stats", "/admin"]) {
      const res = await w.mf.dispatchFetch(`http://localhost${path}`, {
        headers: { authorization: "Bearer minimal-build-admin-token-0123456789" },
      });
      assert.equal(res.status, 404, path);
      await res.arrayBuffer();
    }
  });
});
