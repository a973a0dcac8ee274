#!/usr/bin/env bash
# Installs the .deb that packaging/deb.sh built into this machine (CI, as
# root), checks what a user would, and removes it again.
#
#   packaging/check-deb.sh target/debian/onlyone_VERSION_ARCH.deb
set -euo pipefail
deb=$1
if dpkg -s onlyone >/dev/null 2>&1; then
  echo "check-deb: onlyone is already installed here; not touching it" >&2
  exit 1
fi
dpkg -i "$deb"
trap 'dpkg -r onlyone >/dev/null' EXIT
/usr/bin/onlyone --version
dir=$(mktemp -d)
/usr/bin/onlyone --dir "$dir" run demo -- sh -c 'test -n "$ONLYONE_TOKEN" && echo "ran under the lock"'
/usr/bin/onlyone --dir "$dir" history demo | head -3
rm -rf "$dir"
man -w onlyone
man -w onlyone-run
files=$(dpkg -L onlyone)
for f in /usr/bin/onlyone /usr/share/man/man1/onlyone.1.gz \
  /usr/share/bash-completion/completions/onlyone \
  /usr/share/zsh/vendor-completions/_onlyone \
  /usr/share/fish/vendor_completions.d/onlyone.fish \
  /usr/share/doc/onlyone/README.md \
  /usr/share/doc/onlyone/doc/how-it-works.md \
  /usr/share/doc/onlyone/doc/json.md \
  /usr/share/doc/onlyone/doc/library.md \
  /usr/share/doc/onlyone/doc/operations.md \
  /usr/share/doc/onlyone/doc/security.md \
  /usr/share/doc/onlyone/doc/store.md \
  /usr/share/doc/onlyone/examples/onlyone-nightly-sync.timer; do
  grep -qx "$f" <<<"$files" || { echo "check-deb: $f is not in the package" >&2; exit 1; }
done
# The benchmarks are the project's record, not a user's guide.
if grep -q 'BENCHMARKS' <<<"$files"; then
  echo "check-deb: BENCHMARKS.md is in the package" >&2
  exit 1
fi
# The README's links to its guides hold where it is installed.
for link in $(grep -o '](doc/[a-z-]*\.md' /usr/share/doc/onlyone/README.md | sed 's/^](//' | sort -u); do
  test -f "/usr/share/doc/onlyone/$link" || { echo "check-deb: the README links to $link, not installed" >&2; exit 1; }
done
echo "$files"
trap - EXIT
dpkg -r onlyone
test ! -e /usr/bin/onlyone
echo "check-deb: ok"
