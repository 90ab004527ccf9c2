// The sources this checkout's wrangler.toml declares, each with a secret for
// the tests and a signed event on demand: what a generated copy's tests
// send, whatever providers it kept. Sources tests/support/events.mjs cannot
// sign (a generic source of another shape) are listed apart.
import { unstable_readConfig } from "wrangler";

import { secretVar } from "../../scripts/secret-var.mjs";
import { EVENTS, TEST_SECRETS, forgedSecret } from "./events.mjs";

const DECLARED = Object.entries(unstable_readConfig({ config: "wrangler.toml" }).vars.SOURCES);
const signable = ([, source]) => EVENTS[source.provider] && (EVENTS[source.provider].signs?.(source) ?? true);

/** `[name, settings]` of each source the tests can sign for. */
export const SOURCES = DECLARED.filter(signable);
/** The names of the others. */
export const UNSIGNABLE = DECLARED.filter((source) => !signable(source)).map(([name]) => name);
if (!SOURCES.length) {
  throw new Error(`wrangler.toml declares no source tests/support/events.mjs can sign (${UNSIGNABLE.join(", ")}): add its events there`);
}
/** The first signable source's name, and its provider. */
export const [FIRST, { provider: FIRST_PROVIDER }] = SOURCES[0];

export { secretVar };
/** The worker's secrets for the tests: each source's under its variable. */
export const SOURCE_SECRETS = Object.fromEntries(SOURCES.map(([name, source]) => [secretVar(name, source), TEST_SECRETS[source.provider]]));

/**
 * A fresh signed event of source `name` (`{ id, body, headers }`), or one
 * signed with `secret`; with `size`, its body is exactly that many bytes.
 */
export function eventOf(name, secret, size) {
  const [, source] = SOURCES.find(([n]) => n === name);
  return EVENTS[source.provider](secret ?? TEST_SECRETS[source.provider], name, size);
}

/** An event of `name` signed with a wrong secret. */
export function forgedOf(name) {
  const [, { provider }] = SOURCES.find(([n]) => n === name);
  return eventOf(name, forgedSecret(provider));
}

/** Sends `event` to source `name` on worker `w`: its status and JSON body. */
export const send = (w, name, event, headers = {}) =>
  w.post(`/webhooks/${name}`, event.body, { ...event.headers, ...headers }).then(async (r) => ({ status: r.status, body: await r.json() }));
