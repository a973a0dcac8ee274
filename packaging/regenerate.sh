#!/usr/bin/env bash
# Writes the manual pages and completions the package ships
# (packaging/man/, packaging/completions/) from the binary's own
# definitions; run it after changing the command line, and commit what it
# changed (a test fails while they differ).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin onlyone
bin=target/debug/onlyone
rm -f packaging/man/*.1
"$bin" manpages packaging/man
"$bin" completions bash >packaging/completions/onlyone
"$bin" completions zsh >packaging/completions/_onlyone
"$bin" completions fish >packaging/completions/onlyone.fish
