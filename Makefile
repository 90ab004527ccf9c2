# The two commands a newcomer needs: `make dev` and `make test`.
# Each installs what it needs first (scripts/setup.sh skips what is there).

export WRANGLER_SEND_METRICS := false
export CLOUDFLARE_CF_FETCH_ENABLED := false
# No banner: its update check calls the npm registry.
export WRANGLER_HIDE_BANNER := true
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: dev test setup build lint unit e2e bench fuzz-props fuzz soak

## Serve the worker on http://localhost:8787 with local D1, Durable Objects
## and Queues (state in .wrangler/), secrets from .dev.vars, and the cron
## relay ticking as deployed (scripts/dev.mjs).
dev: setup
	node scripts/dev.mjs --port 8787

## Every check: format, lints, host unit tests, then the built worker
## end to end in workerd (Miniflare) with real D1 and Durable Objects.
test: setup lint unit build e2e

setup:
	sh scripts/setup.sh

## The wasm worker, and the self-test CLI (target/debug/selftest).
build:
	sh scripts/build.sh
	cargo build -p selftest

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p idempotent-webhooks --target wasm32-unknown-unknown -- -D warnings

unit:
	cargo test --workspace

e2e:
	node --test --test-concurrency=1 tests/

## The host property fuzz, long: 500,000 cases per property (make test
## runs 20,000). See RELIABILITY.md.
fuzz-props:
	PROPTEST_CASES=500000 cargo test --release --test property_fuzz

## 100,000 hostile requests at the local worker (make test runs 3,000).
## See RELIABILITY.md.
fuzz: setup build
	node fuzz/requests.mjs 100000

## 10,000 Stripe and GitHub deliveries under make dev's runner while the
## runtime is SIGKILLed 6 times; checks exactly-once. See RELIABILITY.md.
soak: setup build
	node soak/run.mjs 10000

## Throughput and latency against a local worker; see BENCHMARKS.md.
bench: setup build
	node bench/run.mjs
