#!/bin/sh
# What make template-check and make test-copies share, sourced by both:
# cargo-generate at the version they use, a snapshot of this checkout to
# generate from, and `generate`, which makes a copy as a user does.

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
