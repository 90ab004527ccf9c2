#!/bin/sh
# `make upgrade-drill` (and the end of `make template-check`): an upgrade
# from a real release, as an owner makes one. For each store, a Stripe
# copy generated at the previous release, as `cargo generate` made it then:
# - D1: at the previous release's tag (the newest engine-v* older than this
#   engine);
# - Postgres: at that tag if it could make one, else at the first commit
#   of that release's version that could (the tag may predate the
#   Postgres store).
# Each gets recipe (a) as that release wrote it (a new effect, its
# migration and its test) and one edit of its owner's in a file the
# template changes, committed to git. Then, as docs/upgrades.md says for
# a copy that old: `node <this checkout>/scripts/upgrade.mjs <this
# checkout>`. It must plan the versions and the CHANGELOG, finish without
# a conflict, keep the owner's edit and migration, and record the new
# version. Where the release changed the API, `cargo check` must name the
# owner's own file, which is then rewritten as the CHANGELOG says (the
# recipe as it reads now). Then the copy's whole suite, and for Postgres
# its make dev under storms. Last, the upgraded D1 copy turns Postgres on
# (`make store STORE=postgres`), its owner writes its table and test for
# Postgres as the switch says, and its whole suite runs again.
set -eu
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
ROOT=$PWD
. scripts/template/generate.sh

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' crates/engine/Cargo.toml | head -n 1)
# The newest engine-v* tag older than this engine.
PREV_TAG=$(git tag -l 'engine-v*' | node --input-type=module -e '
import { compare } from "./scripts/upgrade-plan.mjs";
const tags = (await new Response(process.stdin).text()).split("\n").filter((t) => /^engine-v\d+\.\d+\.\d+$/.test(t));
const older = tags.filter((t) => compare(t.slice(8), process.argv[1]) < 0).sort((a, b) => compare(a.slice(8), b.slice(8)));
console.log(older.at(-1) ?? "");' "$VERSION")
[ -n "$PREV_TAG" ] || { echo "upgrade-drill: no engine-v* tag older than $VERSION here (a clone without tags?)" >&2; exit 1; }
PREV=${PREV_TAG#engine-v}
engine_version() { git show "$1:crates/engine/Cargo.toml" | sed -n 's/^version = "\(.*\)"$/\1/p' | head -n 1; }
can_postgres() { git show "$1:cargo-generate.toml" | grep -q '^\[placeholders\.store\]'; }
PG_FROM=$PREV_TAG
if ! can_postgres "$PREV_TAG"; then
    for commit in $(git rev-list --reverse "$PREV_TAG..HEAD"); do
        [ "$(engine_version "$commit")" = "$PREV" ] || break
        can_postgres "$commit" && { PG_FROM=$commit; break; }
    done
    can_postgres "$PG_FROM" || { echo "upgrade-drill: no commit of $PREV can generate a Postgres copy" >&2; exit 1; }
fi

WORK=$(mktemp -d)
chmod 755 "$WORK"
# One build directory for both copies (and template-check's, when it runs this).
SHARED=${DRILL_TARGET:-$ROOT/target/copies}
mkdir -p "$SHARED"
# The Postgres copy's clusters are its own, stopped and removed at the end
# (as make test-copies does).
unset PG_DIR PG_PORT PG_DB PG_CLUSTER
trap 'stop_clusters "$WORK"/drill-*/drill-*; rm -rf "$WORK"' EXIT
fail() { echo "upgrade-drill: $NAME: $*" >&2; exit 1; }

# same_copy <commit>: whether <commit> generates the copy FROM made. Of
# the commits that make a copy's files, the upgrade takes the newest (a
# commit after the tag that changed nothing a copy holds, say).
same_copy() {
    [ -n "$1" ] || return 1
    for at in "$FROM" "$1"; do
        [ ! -d "$AT/made-$at/$NAME" ] || continue
        mkdir -p "$AT/made-$at/template"
        git -C "$ROOT" archive "$at" | tar -x -C "$AT/made-$at/template"
        generate "$AT/made-$at" "$NAME" stripe true false "$STORE" >/dev/null || return 1
    done
    diff -r "$AT/made-$FROM/$NAME" "$AT/made-$1/$NAME" >/dev/null
}

# drill <store> <commit>
drill() {
    STORE=$1 FROM=$2 NAME=drill-$1
    started=$(date +%s)
    AT="$WORK/$NAME"
    mkdir -p "$AT/template"
    git archive "$FROM" | tar -x -C "$AT/template"
    generate "$AT" "$NAME" stripe true false "$STORE"
    cd "$AT/$NAME"
    # The owner's work, as the release's README told them.
    node "$AT/template/scripts/template/apply-recipe.mjs" a
    # engine-v0.3.0's recipe (a) left an unused `use super::*;` in its test,
    # which the copy's own make lint refuses: its owner removed it.
    sed -i '/^    use super::\*;$/{N;s/^    use super::\*;\n\(    use crate::effects::EFFECTS;\)$/\1/}' src/effects/invoices.rs
    sed -i 's|^    ("stripe", "customer.subscription.updated"|    // Ours: a subscription follows its customer.\n&|' src/effects/mod.rs
    grep -q "// Ours: a subscription follows its customer." src/effects/mod.rs || fail "the owner's edit did not apply"
    set -- migrations*/*_invoices.sql
    [ -f "$1" ] || fail "recipe (a) wrote no migration"
    migrations="$*"
    git init -q && git add -A && git -c user.name=owner -c user.email=owner@example.com commit -qm "the copy, recipe (a) and an edit of mine"

    node "$ROOT/scripts/upgrade.mjs" "$ROOT" >"$AT/upgrade.log" 2>&1 || { cat "$AT/upgrade.log" >&2; fail "the upgrade failed"; }
    grep -q "webhook-engine $PREV -> $VERSION" "$AT/upgrade.log" || fail "the plan does not name $PREV -> $VERSION"
    grep -q "CHANGELOG, after $PREV:" "$AT/upgrade.log" || fail "the plan has no CHANGELOG entries"
    named=$(sed -n 's/^ *template files: from commit \([0-9a-f]*\) .*/\1/p' "$AT/upgrade.log")
    same_copy "$named" || fail "the plan names ${named:-no commit}, which does not make the copy $FROM made"
    grep -q "// Ours: a subscription follows its customer." src/effects/mod.rs || fail "the owner's edit is lost"
    grep -q '"version": "'"$VERSION"'"' template.lock || fail "template.lock does not record $VERSION"
    for file in $migrations; do
        [ -f "$file" ] || fail "the owner's migration $file moved"
    done

    ln -s "$ROOT/node_modules" node_modules
    ln -s "$SHARED" target
    # The owner's own code, where the API changed: the compiler says where.
    if ! cargo check --quiet --offline 2>"$AT/check.log"; then
        grep -q "src/effects/invoices.rs" "$AT/check.log" || { cat "$AT/check.log" >&2; fail "cargo check failed elsewhere than the owner's code"; }
        node --input-type=module -e '
import { writeFileSync } from "node:fs";
import { RECIPES } from "'"$ROOT"'/scripts/template/recipes.mjs";
for (const step of RECIPES.find((r) => r.id === "a").steps) if (step.write?.endsWith(".rs")) writeFileSync(step.write, step.text);'
        echo "upgrade-drill: $NAME: cargo check named src/effects/invoices.rs; rewritten as the CHANGELOG says"
    fi
    copy_suite "$STORE" || fail "its suite failed"
    echo "upgrade-drill: $NAME: generated at $FROM ($PREV), upgraded to $VERSION, its suite passed in $(($(date +%s) - started)) s"
}

# switch: the D1 copy in the current directory, upgraded, turns Postgres
# on; its owner writes the invoices table and test for Postgres (recipe
# (a)'s Postgres steps); then its suite on Postgres.
switch() {
    started=$(date +%s)
    git add -A && git -c user.name=owner -c user.email=owner@example.com commit -qm "upgraded to $VERSION"
    make store STORE=postgres ENGINE="$ROOT" >"$AT/store.log" 2>&1 || { cat "$AT/store.log" >&2; fail "make store STORE=postgres failed"; }
    grep -q "store d1 -> postgres" "$AT/store.log" || fail "the plan does not name the switch"
    grep -q "your own migrations are D1's: .*_invoices\.sql" "$AT/store.log" || fail "the switch does not name the owner's migration"
    grep -qx 'STORE = "postgres"' wrangler.toml || fail "wrangler.toml is not on Postgres"
    [ -f scripts/postgres.sh ] && [ -f docs/postgres.md ] || fail "the Postgres files did not come"
    node --input-type=module -e '
import { readdirSync, writeFileSync } from "node:fs";
import { RECIPES } from "'"$ROOT"'/scripts/template/recipes.mjs";
for (const step of RECIPES.find((r) => r.id === "a").steps.filter((s) => s.store === "postgres")) {
  const next = (dir) => String(Number(readdirSync(dir).sort().at(-1).slice(0, 4)) + 1).padStart(4, "0");
  if (step.migration) writeFileSync(`${step.dir}/${next(step.dir)}_${step.migration}.sql`, step.text);
  if (step.write) writeFileSync(step.write, step.text);
}'
    copy_suite postgres || fail "its suite on Postgres failed"
    echo "upgrade-drill: $NAME: on Postgres after make store, its suite passed in $(($(date +%s) - started)) s"
}

drill d1 "$PREV_TAG"
switch
cd "$ROOT"
drill postgres "$PG_FROM"
cd "$ROOT"
echo "upgrade-drill: copies of $PREV, D1 and Postgres, upgrade to $VERSION and pass their suites; the D1 one passes again on Postgres after make store"
