#!/usr/bin/env bash
# Builds the Debian package with cargo-deb: the release binary (dynamically
# linked: HACKING.md, "Building", says why not static-pie), its manual
# pages and completions (packaging/man/, packaging/completions/: written by
# the binary itself, see packaging/regenerate.sh), the README and its
# guides (doc/*.md) and the example systemd units. Prints the .deb's path.
#
#   packaging/deb.sh          # needs cargo-deb: cargo install cargo-deb --locked
set -euo pipefail
cd "$(dirname "$0")/.."
cargo deb --quiet | tail -1
