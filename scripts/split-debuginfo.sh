#!/usr/bin/env bash
# Splits a release binary into what ships and what symbolises it:
#   OUT/NAME        the binary without its debug info (the line tables [profile.release] keeps),
#                   with its symbol table (function names in panic backtraces) and a
#                   .gnu_debuglink naming NAME.debug
#   OUT/NAME.debug  the debug info alone, for perf, gdb and addr2line (they find it beside the
#                   binary, or by the build id both carry)
# The Dockerfile ships OUT/NAME; `docker build --target debuginfo --output type=local,dest=DIR .`
# writes the .debug of the same build. .ci/run runs this on the slim build and checks the result.
#
#   scripts/split-debuginfo.sh target/release/tokenmeter target/split
set -euo pipefail
bin=${1:?usage: split-debuginfo.sh BINARY OUTDIR}
out=${2:?usage: split-debuginfo.sh BINARY OUTDIR}
command -v objcopy >/dev/null || { echo "split-debuginfo: objcopy (binutils) is needed" >&2; exit 1; }
name=$(basename "$bin")
bin=$(realpath "$bin")
mkdir -p "$out"
cd "$out"
objcopy --only-keep-debug "$bin" "$name.debug"
# Run inside OUT, so the debuglink names the file alone (found beside the binary).
objcopy --strip-debug --add-gnu-debuglink="$name.debug" "$bin" "$name"
ls -l "$bin" "$name" "$name.debug" | awk '{print $5, $NF}'
