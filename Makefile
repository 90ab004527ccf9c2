# The two commands a newcomer needs: `make dev` and `make test`.
# Each installs what it needs first (scripts/setup.sh skips what is there).

export WRANGLER_SEND_METRICS := false
export CLOUDFLARE_CF_FETCH_ENABLED := false
# No banner: its update check calls the npm registry.
export WRANGLER_HIDE_BANNER := true
export PATH := $(HOME)/.cargo/bin:$(PATH)
# wrangler's debug log (every line it logs) in the project's ignored state,
# not ~/.config/.wrangler/logs; scripts/setup.sh prunes it.
export WRANGLER_LOG_PATH := $(CURDIR)/.wrangler/logs
# make dev's port.
PORT ?= 8787
# A build with fewer providers (and neither admin surface), checked too.
MINIMAL := stripe,github
# needs: postgres
# make test leaves no test cluster running (cargo test's harness leaves it
# for the next run).
STOP_TEST_CLUSTER := PG_CLUSTER=postgres-test $(if $(PG_DIR),PG_DIR=$(PG_DIR)-test) sh scripts/postgres.sh stop
# needs: postgres, d1
# The build whose effects may commit in Postgres (docs/postgres.md).
POSTGRES := stripe,github,standard-webhooks,shopify,slack,linear,paddle,twilio,generic-hmac,admin,dashboard,postgres

.PHONY: dev sink test test-copies setup setup-test setup-template build build-minimal build-postgres lint unit config-check e2e bench costs forward-bench bodies fuzz-props fuzz soak deploy migrate upgrade template-check sizes gateway-bench dev-bench profile relay-bench store-bench drain-bench proxy-bench semver-check upgrade-drill store effect-bench copy-bench

## Serve the worker on http://localhost:$(PORT) with local D1, Durable
## Objects and Queues (state in .wrangler/), secrets from .dev.vars, and the
## cron relay ticking as deployed (scripts/dev.mjs). `make dev PORT=8788`
## serves on another port.
## STORE=postgres: effects in a local Postgres cluster (scripts/postgres.sh).
dev: setup
	if [ "$(STORE)" = postgres ]; then sh scripts/setup.sh --with-postgres; fi
	$(if $(filter postgres,$(STORE)),WORKER_FEATURES=$(POSTGRES)) node scripts/dev.mjs --port $(PORT) $(if $(STORE),--store $(STORE))

## A local destination for forwarding: verifies and prints each request.
sink: setup
	node scripts/sink.mjs 9000

## Every check: format, lints, host unit tests, wrangler's deploy
## validation, then the built worker end to end in workerd (Miniflare) with
## real D1, Durable Objects and Queues.
test: setup setup-test setup-template lint unit build-minimal build-postgres build config-check e2e
	$(STOP_TEST_CLUSTER)

## What running needs (make dev).
setup:
	sh scripts/setup.sh

# needs: dashboard
## The browser the dashboard test drives.
setup-test:
	sh scripts/setup.sh --with-browser --with-postgres

# needs: template
## shellcheck, for the generated copies' scripts (tests/copies.test.mjs).
setup-template:
	sh scripts/setup.sh --with-shellcheck

## The wasm worker with every feature (the tests need them all, whatever
## WORKER_FEATURES says), and the self-test CLI (target/debug/selftest).
build:
	WORKER_FEATURES= sh scripts/build.sh
	cargo build -p selftest

# needs: everything
## The $(MINIMAL) build without the admin surface, kept in
## target/variants/ for tests/minimal-build.test.mjs.
build-minimal:
	WORKER_FEATURES=$(MINIMAL) sh scripts/build.sh
	rm -rf "target/variants/$(MINIMAL)" && mkdir -p target/variants && cp -r build "target/variants/$(MINIMAL)"

# needs: postgres, d1
## The Postgres build, kept in target/variants/postgres for
## tests/postgres.test.mjs (which starts a local cluster: scripts/postgres.sh).
build-postgres:
	WORKER_FEATURES=$(POSTGRES) sh scripts/build.sh
	rm -rf target/variants/postgres && mkdir -p target/variants && cp -r build target/variants/postgres

## Formatting, clippy (host, the wasm, the $(MINIMAL) wasm) and the
## API docs, all without a warning; the engine packaged as crates.io would
## take it (never published from here).
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --target wasm32-unknown-unknown -p webhook-engine -- -D warnings
	cargo clippy --target wasm32-unknown-unknown -- -D warnings
	cargo clippy --target wasm32-unknown-unknown --no-default-features --features $(MINIMAL) -- -D warnings
	cargo clippy --target wasm32-unknown-unknown -p webhook-engine --features postgres -- -D warnings
	cargo clippy -p webhook-engine --all-targets --features postgres,testing -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
	cargo package -p webhook-engine --allow-dirty --quiet

## The host tests: the engine's, and your effects' (src/effects/), each
## applied with its ledger row to a real database made from your
## migrations (docs/extend.md, "Test your effect").
unit:
	cargo test --workspace
	cargo test -p webhook-engine --lib --no-default-features --features $(MINIMAL) providers::
	cargo test -p webhook-engine --lib --features postgres,testing -- postgres:: testing::
	cargo test --lib --features postgres effects::

## The built worker, its Durable Object class, migrations and bindings
## through wrangler's own deploy validation, offline; the CI workflows parse.
config-check:
	node scripts/check-workflows.mjs
	WORKER_FEATURES= BUILD_IF_CHANGED=1 node_modules/.bin/wrangler deploy --dry-run --outdir target/dry-run

e2e:
	node --test --test-concurrency=1 tests/

# needs: everything
## The host property fuzz, long: 500,000 cases per property (make test
## runs 20,000). See the template's RELIABILITY.md.
fuzz-props:
	PROPTEST_CASES=500000 cargo test --release --test property_fuzz

# needs: stripe, github, demos, dashboard
## 100,000 hostile requests at the local worker, then 20,000 at its admin
## API and dashboard (make test runs 3,000 and 2,000). See the template's RELIABILITY.md.
fuzz: setup build
	node fuzz/requests.mjs 100000
	node fuzz/admin.mjs 20000

# needs: everything
## 10,000 Stripe and GitHub deliveries under make dev's runner while the
## runtime is SIGKILLed 6 times; checks exactly-once. See the template's RELIABILITY.md.
## STORE=postgres: effects in a local Postgres, restarted twice mid-run.
soak: setup
	if [ "$(STORE)" = postgres ]; then sh scripts/setup.sh --with-postgres; fi
	$(if $(filter postgres,$(STORE)),WORKER_FEATURES=$(POSTGRES)) sh scripts/build.sh
	$(if $(filter postgres,$(STORE)),WORKER_FEATURES=$(POSTGRES)) STORE=$(STORE) node soak/run.mjs 10000

## Deploy to your Cloudflare account (wrangler logs you in): creates the D1
## database (its id written into wrangler.toml), queues and secrets that do
## not exist yet, applies the migrations, deploys, and prints the webhook
## URLs. Running it again changes nothing that exists.
deploy: setup
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" node scripts/deploy.mjs

## Only make deploy's first steps: log in, the D1 database, the remote
## migrations. At a quiet hour before make deploy, for a long migration;
## STEPWISE=<file> runs that one a paragraph per request, then records it
## as wrangler does (docs/deploy.md, "A long migration").
migrate: setup
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" node scripts/deploy.mjs --migrations-only $(if $(STEPWISE),--stepwise "$(STEPWISE)")

## Bring a newer engine into this copy: its code (crates/engine, whole)
## and its new migrations, after yours, by the newest program (a newer
## checkout's), which prints its plan first. ENGINE is a directory or a
## version: `make upgrade ENGINE=../idempotent-webhooks`. See docs/upgrades.md.
upgrade:
	FORCE="$(FORCE)" node scripts/upgrade.mjs "$(ENGINE)"

## Where your effects commit, switched: `make store STORE=<store>
## ENGINE=<a checkout of the template>`. The copy's files are made again
## for that store and merged with yours, as make upgrade does
## (docs/upgrades.md, "Switch stores").
store:
	FORCE="$(FORCE)" node scripts/upgrade.mjs "$(ENGINE)" --store "$(STORE)"

# needs: template
## What a user gets, at every landing (.ci/run runs it after make test):
## the Stripe-only copies, on D1 and on Postgres, generated with
## cargo-generate, each running its own make test, then serving under its
## make dev (scripts/template/test-copies.sh).
test-copies: setup
	sh scripts/template/test-copies.sh

# needs: template
## The engine's public API against its last release (the newest engine-v*
## tag, or BASE=<tag>): a break the version does not announce fails
## (cargo-semver-checks). A release step, not CI's: its first install takes
## about 6 minutes (docs/releasing.md).
semver-check:
	sh scripts/template/semver-check.sh

## cargo generate from this checkout into a temporary directory, four
## copies (Stripe alone; GitHub and hmac; Twilio first; every default),
## each checked for names left behind, given its recipes, then its whole
## suite; then the upgrade drill (about 33 minutes; 4 more to install
## cargo-generate the first time).
template-check: setup
	sh scripts/template-check.sh

# needs: template
## Copies of the previous release (its engine-v* tag), D1 and Postgres,
## with recipe (a) and an edit of their owner's, upgraded to this checkout
## as docs/upgrades.md says, then their whole suites; then the D1 one on
## Postgres, after make store (about 18 minutes).
upgrade-drill: setup
	sh scripts/template/upgrade-drill.sh

# needs: template
## How long `cargo test` takes to prove an effect in a Stripe-only copy of
## each store (recipe (a)): the first run, after an edit, and with a
## column misspelled; see the template's BENCHMARKS.md.
effect-bench: setup
	sh scripts/template/effect-bench.sh

# needs: template
## Issue #47's measure: a Stripe copy with the demos under its own make dev,
## 600 signed checkouts at 16 in flight, on D1 then on Postgres; prints
## Postgres's rate as a share of D1's, and its commits per new event.
copy-bench: setup
	sh scripts/template/copy-bench.sh

# needs: everything
## The worker's wasm size per feature set, and the cold start of the
## default and Stripe + GitHub builds; see the template's BENCHMARKS.md.
sizes: setup
	sh bench/sizes.sh

# needs: everything
## Throughput and latency against a local worker; see the template's BENCHMARKS.md.
bench: setup build
	node bench/run.mjs

# needs: everything
## D1 and Postgres as the store, one after the other in one run: new events
## acknowledged and fully processed per second, storm copies per second,
## and Postgres's transactions and rows per event (the template's BENCHMARKS.md).
store-bench: setup build-postgres
	sh scripts/setup.sh --with-postgres
	node bench/stores.mjs

# needs: everything
## How fast the cron relay drains a Postgres store's hand-off backlog
## (BENCH_ROWS rows, default 60000): rows and seconds per run, and the
## minutes an hour's D1 outage at 50 events/s takes (the template's BENCHMARKS.md).
drain-bench: setup build-postgres
	sh scripts/setup.sh --with-postgres
	node bench/handoff-drain.mjs

# needs: everything
## One new event at a time on Postgres through the local Hyperdrive proxy,
## its sockets with TCP_NODELAY (scripts/hyperdrive-guard.cjs) and without:
## p50, p90 and mean ms (the template's BENCHMARKS.md).
proxy-bench: setup build-postgres
	sh scripts/setup.sh --with-postgres
	node bench/proxy-latency.mjs

# needs: everything
## Billable operations per distinct event, duplicate, side effect, forwarded
## event and retention wake-up, and the dollars per million events; see
## the template's BENCHMARKS.md.
costs: setup build
	node bench/costs.mjs

# needs: everything
## Forwarding end to end: events delivered to a local sink per second, and
## the time to acknowledge; see the template's BENCHMARKS.md.
forward-bench: setup build
	node bench/forward.mjs

# needs: everything
## The D1 rows one forward relay run reads with 100,000 deliveries held
## for a destination whose breaker is open; see the template's BENCHMARKS.md.
relay-bench: setup build
	node bench/relay-held.mjs

# needs: everything
## This worker (REPLY_AFTER effect and record) beside a minimal KV-dedupe
## gateway (bench/reference/), alternately under wrangler dev; see
## the template's BENCHMARKS.md.
gateway-bench: setup build
	node bench/gateway.mjs

# needs: everything
## Where the local runtime's CPU goes per new event and per copy, from a
## Linux perf profile of make dev under load; see the template's BENCHMARKS.md.
profile: setup build
	node bench/profile.mjs

# needs: everything
## A first load test against make dev, five times from a fresh start, a
## cron tick in each; see the template's BENCHMARKS.md.
dev-bench: setup build
	node bench/stalls.mjs

# needs: everything
## Runtime CPU per event for bodies of 1 KiB to 1 MiB; see the template's BENCHMARKS.md.
bodies: setup build
	node bench/bodies.mjs
