#!/bin/sh
# make semver-check: webhook-engine's public API against its last release,
# with cargo-semver-checks (installed if missing). BASE=<tag or commit>
# picks another baseline; by default, the newest engine-v* tag that HEAD
# holds. A change that breaks the API fails unless the engine's version
# says so (before 1.0: a minor bump). A release step (docs/releasing.md).
set -eu
VERSION=0.51.0
export PATH="$HOME/.cargo/bin:$PATH"

if ! cargo semver-checks --version 2>/dev/null | grep -qx "cargo-semver-checks $VERSION"; then
    echo "semver-check: installing cargo-semver-checks $VERSION (about 6 minutes, once)"
    cargo install cargo-semver-checks --version "$VERSION" --locked
fi
base=${BASE:-$(git tag --list 'engine-v*' --merged HEAD --sort=-v:refname | head -n 1)}
if [ -z "$base" ]; then
    echo "semver-check: no engine-v* tag in this clone (git fetch --tags), or say BASE=<tag or commit>" >&2
    exit 2
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' crates/engine/Cargo.toml | head -n 1)
echo "semver-check: webhook-engine $version against $base"
cargo semver-checks -p webhook-engine --baseline-rev "$base"
