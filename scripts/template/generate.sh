#!/bin/sh
# What make template-check, make test-copies and make upgrade-drill share,
# sourced by each: cargo-generate at the version they use, a snapshot of
# this checkout to generate from, `generate`, which makes a copy as a user
# does, `copy_suite`, which runs its suite, and `stop_clusters`.

# Without its default features (git over https, the new prompts): generating
# from a local path needs neither. 0.26's locked dependencies need a newer
# rustc than the pinned 1.95. Built unoptimized: 1 min 48 s instead of
# 4 min 26 s on 2 cores, and a copy still generates in about a second.
CARGO_GENERATE_VERSION=0.23.5
if ! cargo generate --version 2>/dev/null | grep -q " $CARGO_GENERATE_VERSION\$"; then
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_LTO=off \
        cargo install cargo-generate --version "$CARGO_GENERATE_VERSION" --no-default-features --locked
fi

# snapshot <dir>: the checkout's files, committed or not, without what git
# ignores (target/, node_modules/, .dev.vars, …), into <dir>/template.
snapshot() {
    mkdir "$1/template"
    git ls-files -z --cached --others --exclude-standard |
        xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' files |
        xargs -0 cp --parents -t "$1/template"
}

# generate <work dir> <name> <providers> <demos> <dashboard> <store>: the
# copy <work dir>/<name>, from <work dir>/template, as the README's
# `cargo generate` line makes it.
generate() {
    (cd "$1" && cargo generate --path "$1/template" --name "$2" --destination "$1" \
        --allow-commands --silent --vcs none \
        -d providers="$3" -d demos="$4" -d dashboard="$5" -d store="$6")
}

# copy_suite <store>: in a copy's folder, its whole suite as its make test
# runs it but the installs (the caller's make test made them); on Postgres,
# then its make dev under storms, a Postgres restart and psql's count
# (dev-check.mjs). Fails as soon as a step does (each checked: callers
# write `copy_suite … || fail …`, where sh ignores set -e).
copy_suite() {
    targets=""
    for target in $(sed -n 's/^test://p' Makefile); do
        case "$target" in setup | setup-test) ;; *) targets="$targets $target" ;; esac
    done
    # shellcheck disable=SC2086
    make $targets || return 1
    [ "$1" != postgres ] || node "$ROOT/scripts/template/dev-check.mjs" || return 1
}

# stop_clusters <copy>...: each Postgres copy's local clusters stopped, and
# their data removed where they live outside the copy (scripts/postgres.sh
# puts them there when the server's user cannot reach it), and nowhere else.
stop_clusters() {
    outside=$(getent passwd postgres | cut -d: -f6)/webhooks-clusters/
    for copy in "$@"; do
        [ -f "$copy/scripts/postgres.sh" ] || continue
        for cluster in postgres postgres-test; do
            dir=$(PG_CLUSTER=$cluster sh "$copy/scripts/postgres.sh" dir) || continue
            PG_CLUSTER=$cluster sh "$copy/scripts/postgres.sh" stop || true
            case "$dir" in "$outside"*/"$cluster") rm -rf "$dir" "$dir.lock" && rmdir "$(dirname "$dir")" 2>/dev/null || true ;; esac
        done
    done
}
