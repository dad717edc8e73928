#!/usr/bin/env bash
# One build for the README's two commands. Fails when
#   cargo run --release -- demo        (culprit-cli's `culprit` binary alone)
#   cargo test --release --workspace   (.ci/run: every member, dev-deps too)
# would build a package they share with different features. Cargo hashes a
# crate's features into its artifact, and every crate above it inherits that
# hash, so one differing feature (serde "alloc" from criterion, say) makes the
# second command rebuild arrow, parquet and DataFusion from scratch.
#
# Only `cargo tree` runs here: it resolves features and compiles nothing.
# Extra arguments go to cargo tree (e.g. --offline, --locked, --frozen).
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One line per package node, "name vX.Y.Z[ (proc-macro)]<TAB>feat1,feat2".
# With -e features and --prefix none cargo tree also prints `foo feature "bar"`
# nodes: drop them, the path of path packages and the "(*)" of repeated nodes.
list() {
  cargo tree "$@" -e features --prefix none --format '{p} {f}' \
    | grep -v ' feature "' \
    | sed -E 's/ \((\/|file:|registry\+|git\+)[^)]*\)//; s/ \(\*\)$//; s/ +$//' \
    | sed -E 's/^([^ ]+ v[^ ]+( \(proc-macro\))?) ?(.*)$/\1\t\3/' \
    | LC_ALL=C sort -u
}

# What `cargo run --release -- demo` builds: culprit-cli, no dev-dependencies.
list -p culprit-cli -e normal,build "$@" >"$tmp/run"
# What `cargo test --release --workspace` builds: all members, dev-deps too.
list --workspace -e normal,build,dev "$@" >"$tmp/test"

cut -f1 "$tmp/run" | LC_ALL=C sort -u >"$tmp/run.pkgs"
cut -f1 "$tmp/test" | LC_ALL=C sort -u >"$tmp/test.pkgs"
LC_ALL=C comm -12 "$tmp/run.pkgs" "$tmp/test.pkgs" >"$tmp/shared"

# Keep the shared packages' lines; any line in one build and not the other is
# a package built with a feature set the other build does not use.
shared_lines() { awk -F'\t' 'NR==FNR {s[$1]=1; next} ($1 in s)' "$tmp/shared" "$1"; }
shared_lines "$tmp/run" >"$tmp/run.shared"
shared_lines "$tmp/test" >"$tmp/test.shared"
LC_ALL=C comm -3 "$tmp/run.shared" "$tmp/test.shared" | sed 's/^\t//' | cut -f1 | LC_ALL=C sort -u >"$tmp/differ"

if [ -s "$tmp/differ" ]; then
  while IFS= read -r p; do
    echo "DIFFERS: $p"
    echo "    cargo run  --release -- demo     : $(awk -F'\t' -v p="$p" '$1==p {print ($2==""?"(no features)":$2)}' "$tmp/run" | paste -sd'|')"
    echo "    cargo test --release --workspace : $(awk -F'\t' -v p="$p" '$1==p {print ($2==""?"(no features)":$2)}' "$tmp/test" | paste -sd'|')"
  done <"$tmp/differ"
  cat >&2 <<'MSG'
error: `cargo run --release -- demo` and `cargo test --release --workspace`
resolve the features of the packages above differently, so running both
compiles them, and everything built on them (arrow, parquet, DataFusion, ...),
twice. See who enables the extra features with
    cargo tree --workspace -e features,normal,build,dev -i NAME@VERSION
then add the package with those features to
crates/culprit-workspace-hack/Cargo.toml (every member depends on it), or run
`cargo hakari generate` if cargo-hakari is installed.
MSG
  exit 1
fi
echo "one build: the $(wc -l <"$tmp/shared") packages that \`cargo run --release -- demo\` builds get the same features in \`cargo test --release --workspace\`"
