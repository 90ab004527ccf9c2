#!/bin/sh
# `make template-check`: generates a copy of this checkout with
# cargo-generate, as a user does from the repository, then checks the copy
# took its name everywhere, runs its host tests, passes wrangler's deploy
# validation (a dry run), serves deliveries in workerd (the receiver's
# end-to-end tests: the local runtime accepts its compatibility_date), and
# runs `make deploy`'s test against the stand-in wrangler under the new
# names. Installs cargo-generate if missing.
set -eu
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
ROOT=$PWD

# Without its default features (git over https, the new prompts): generating
# from a local path needs neither. 0.26's locked dependencies need a newer
# rustc than the pinned 1.95.
CARGO_GENERATE_VERSION=0.23.5
if ! cargo generate --version 2>/dev/null | grep -q " $CARGO_GENERATE_VERSION\$"; then
    cargo install cargo-generate --version "$CARGO_GENERATE_VERSION" --no-default-features --locked
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The checkout's files, committed or not, without what git ignores (target/,
# node_modules/, .dev.vars, …).
mkdir "$WORK/template"
git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' files |
    xargs -0 cp --parents -t "$WORK/template"

NAME=hooks-check
cargo generate --path "$WORK/template" --name "$NAME" --destination "$WORK" \
    --allow-commands --silent --vcs none
cd "$WORK/$NAME"

fail() { echo "template-check: $*" >&2; exit 1; }
grep -qx "name = \"$NAME\"" Cargo.toml || fail "Cargo.toml keeps the template's package name"
grep -qx "name = \"$NAME\"" wrangler.toml || fail "wrangler.toml keeps the template's worker name"
grep -qx "database_name = \"$NAME\"" wrangler.toml || fail "the D1 database keeps the template's name"
grep -qx "queue = \"$NAME-outbox\"" wrangler.toml || fail "the queues keep the template's names"
# Today, or the newest date the locked workerd supports if that is earlier.
SUPPORTED=$(grep -A1 '"node_modules/workerd"' package-lock.json |
    sed -n 's/.*"version": "1\.\([0-9]\{4\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)\..*/\1-\2-\3/p')
DATE=$(printf '%s\n%s\n' "$(date -u +%F)" "$SUPPORTED" | sort | head -n 1)
grep -qx "compatibility_date = \"$DATE\"" wrangler.toml || fail "compatibility_date is not $DATE"
! grep -rqs "idempotent-webhooks\|idempotent_webhooks\|webhook-outbox" \
    Cargo.toml Cargo.lock wrangler.toml package.json tests || fail "a template name is left"
[ ! -e cargo-generate.toml ] && [ ! -e scripts/template ] || fail "the template's own files are left"

# The same npm packages as this checkout: nothing is downloaded again.
ln -s "$ROOT/node_modules" node_modules
cargo test --workspace
make config-check
node --test --test-concurrency=1 tests/receiver.test.mjs tests/deploy.test.mjs
echo "template-check: the generated $NAME builds, tests and passes the dry-run deploy"
