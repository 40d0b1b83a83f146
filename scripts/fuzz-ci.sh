#!/usr/bin/env bash
# Runs every cargo-fuzz target listed in fuzz/Cargo.toml for SECONDS each (default 60) on the
# nightly toolchain, one after the other, starting from the committed seed corpus. Fails on the
# first target that crashes, leaks or times out (libFuzzer exits non-zero), naming it; the
# reproducer is left in fuzz/artifacts/<target>/.
#
#   scripts/fuzz-ci.sh [SECONDS]
#
# Needs: rustup's nightly toolchain and cargo-fuzz (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz-ci: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --help >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# Target names: the [[bin]] sections whose path is under fuzz_targets/ (other bins, such as a
# seed-corpus writer, are tools, not targets).
mapfile -t targets < <(awk '
  /^\[\[bin\]\]/ {bin = 1; name = ""; next}
  /^\[/ {bin = 0}
  bin && /^name *=/ {name = $0; gsub(/.*= *"|".*/, "", name)}
  bin && /^path *= *"fuzz_targets\// {print name}
' fuzz/Cargo.toml)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz-ci: no [[bin]] targets in fuzz/Cargo.toml" >&2
  exit 2
fi

# One known false leak (a thread-local destructor node of a background thread on its way out)
# is suppressed; see the file for why.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/fuzz/lsan-suppressions.txt"

echo "fuzz-ci: ${#targets[@]} targets, ${seconds}s each: ${targets[*]}"
(cd fuzz && cargo +nightly fuzz build -O)
failed=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  # A scratch copy of the corpus, so a CI run never adds files to the committed seeds.
  work="$(mktemp -d)"
  cp -r "fuzz/corpus/$t/." "$work/" 2>/dev/null || true
  echo "=== fuzz $t (${seconds}s)"
  if (cd fuzz && cargo +nightly fuzz run -O "$t" "$work" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1); then
    echo "=== $t: no crash"
  else
    echo "=== $t: FAILED (reproducer under fuzz/artifacts/$t/)" >&2
    failed+=("$t")
  fi
  rm -rf "$work"
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz-ci: crashing targets: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz-ci: all ${#targets[@]} targets ran ${seconds}s without a crash"
