#!/bin/sh
# `make template-check`: generates copies of this checkout with
# cargo-generate, as a user does from the repository, and checks each:
# - it took its name everywhere, and the template's own files are gone;
# - no unchosen provider's name and no demo name is left in src/, tests/,
#   wrangler.toml, migrations/ or its README;
# - the README's "Make it yours" recipes that apply to it, applied as
#   written (scripts/template/apply-recipe.mjs);
# - then its whole test suite (`make test` but the installs: lint with
#   warnings as errors, host tests, wasm builds, deploy validation, end to
#   end in workerd); a Postgres copy then runs under its make dev runner
#   through storms and a Postgres restart (scripts/template/dev-check.mjs).
# - the upgrade drill (scripts/template/upgrade-drill.sh): copies of the
#   previous release, D1 and Postgres, with recipe (a) and an edit of their
#   owner's, upgraded to this checkout, then their whole suites.
# The copies: `providers=stripe dashboard=false store=postgres` (effects in
# a local Postgres); `providers=github,hmac demos=false dashboard=true`;
# seven providers with Twilio first, without demos; all defaults. Installs
# cargo-generate if missing.
set -eu
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
ROOT=$PWD

# cargo-generate, snapshot and generate.
. scripts/template/generate.sh

# docs/recipes.md is the recipes this check applies.
node scripts/template/recipes-doc.mjs

WORK=$(mktemp -d)
# Open to others: as root, the Postgres copy's clusters run as the user
# postgres, which must reach them.
chmod 755 "$WORK"
trap 'stop_clusters "$WORK"/hooks-*; rm -rf "$WORK"' EXIT
snapshot "$WORK"
# One build directory for every copy: the dependencies compile once.
mkdir "$WORK/target"

ALL="stripe github standard-webhooks svix shopify slack linear paddle twilio hmac"
fail() { echo "template-check: $NAME: $*" >&2; exit 1; }

# check <name> <providers> <demos> <dashboard> <recipes> [store]
check() {
    NAME=$1 PROVIDERS=$2 DEMOS=$3 DASHBOARD=$4 RECIPES=$5 STORE=${6:-d1}
    started=$(date +%s)
    generate "$WORK" "$NAME" "$PROVIDERS" "$DEMOS" "$DASHBOARD" "$STORE"
    cd "$WORK/$NAME"

    grep -qx "name = \"$NAME\"" Cargo.toml || fail "Cargo.toml keeps the template's package name"
    grep -qx "name = \"$NAME\"" wrangler.toml || fail "wrangler.toml keeps the template's worker name"
    grep -qx "database_name = \"$NAME\"" wrangler.toml || fail "the D1 database keeps the template's name"
    grep -qx "queue = \"$NAME-outbox\"" wrangler.toml || fail "the queues keep the template's names"
    grep -qx "queue = \"$NAME-forward\"" wrangler.toml || fail "the forward queue keeps the template's name"
    # Today, or the newest date the locked workerd supports if that is earlier.
    SUPPORTED=$(grep -A1 '"node_modules/workerd"' package-lock.json |
        sed -n 's/.*"version": "1\.\([0-9]\{4\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)\..*/\1-\2-\3/p')
    DATE=$(printf '%s\n%s\n' "$(date -u +%F)" "$SUPPORTED" | sort | head -n 1)
    grep -qx "compatibility_date = \"$DATE\"" wrangler.toml || fail "compatibility_date is not $DATE"
    ! grep -rqs "idempotent-webhooks\|idempotent_webhooks\|webhook-outbox" \
        Cargo.toml Cargo.lock wrangler.toml package.json tests || fail "a template name is left"
    ! grep -qs "webhook-forward" wrangler.toml || fail "the forward queue keeps the template's name"
    [ ! -e cargo-generate.toml ] && [ ! -e scripts/template ] && [ ! -e scripts/template-check.sh ] ||
        fail "the template's own files are left"
    ! grep -rqsE "^\s*(//|#|--) needs( one of)?: " src tests cli scripts migrations migrations-postgres Makefile Cargo.toml || fail "a needs: marker is left"
    if [ "$STORE" = postgres ]; then
        grep -qx 'STORE = "postgres"' wrangler.toml || fail "its store is not Postgres"
    elif [ ! -d soak ]; then
        # Any answer but the defaults (which keep the template whole).
        ! grep -qsi "postgres\|hyperdrive" Makefile Cargo.toml wrangler.toml scripts/dev.mjs scripts/deploy.mjs scripts/setup.sh README.md ||
            fail "a D1 copy names Postgres"
    fi

    # What was not chosen leaves no name behind (tests/copies.test.mjs
    # checks every provider alone this way, without building).
    node "$ROOT/scripts/template/names.mjs" "$PROVIDERS" "$DEMOS" || fail "names are left"
    cargo metadata --format-version 1 --locked --offline >/dev/null || fail "its Cargo.lock is not in sync"
    # Its docs describe it: no file or make target it lacks.
    node "$ROOT/scripts/template/refs.mjs" || fail "its docs name what it does not have"
    ! grep -rqs "<!-- needs" docs || fail "a needs: marker is left in docs/"
    [ "$DASHBOARD" = true ] || ! grep -q "^dashboard = " Cargo.toml || fail "the dashboard is left"
    # The engine is vendored whole, as upgrades bring it.
    diff -r "$WORK/template/crates/engine" crates/engine >/dev/null || fail "crates/engine is not the engine"

    for recipe in $RECIPES; do
        node "$ROOT/scripts/template/apply-recipe.mjs" "$recipe"
    done

    # The same npm packages and one build directory: nothing is downloaded
    # again, and the dependencies compile once.
    ln -s "$ROOT/node_modules" node_modules
    ln -s "$WORK/target" target
    # What its make test runs, but the installs; a Postgres copy then under
    # its own make dev: storms, a Postgres restart, the rows counted with psql.
    copy_suite "$STORE" || fail "its suite failed"
    size=$(gzip -9 -c build/index_bg.wasm | wc -c)
    echo "template-check: $NAME ($PROVIDERS; demos $DEMOS; dashboard $DASHBOARD; store $STORE; recipes:$RECIPES) passed in $(($(date +%s) - started)) s; its wasm: $size bytes gzipped"
}

check hooks-stripe stripe true false " a b c" postgres
check hooks-github-hmac github,hmac false true " b"
# The tests send the first declared source's events: here Twilio's, whose
# signature covers the URL, with no demo and the dashboard.
check hooks-twilio-first twilio,svix,slack,shopify,linear,paddle,standard-webhooks false true " b"
check hooks-all "$(echo $ALL | tr ' ' ,)" true true " a b c"
# The upgrade drill: copies of the previous release, D1 and Postgres,
# upgraded to this checkout, then their suites (the same build directory).
DRILL_TARGET="$WORK/target" sh "$ROOT/scripts/template/upgrade-drill.sh"
echo "template-check: four generated copies, their recipes, the upgrade drill and their whole suites pass"
