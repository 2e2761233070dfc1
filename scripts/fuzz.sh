#!/usr/bin/env bash
# Runs each cargo-fuzz target for a bounded time (default 60 s each) on stable Rust.
#
#   scripts/fuzz.sh            # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh sse_meter
#
# cargo-fuzz needs nightly-only flags (-Zsanitizer); RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them. Install once with `cargo install cargo-fuzz`. A crash leaves its input in
# fuzz/artifacts/<target>/; turn it into a regular test (see docs/reliability.md) before fixing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(sse_meter prompt_extract request_framing upstream_response)
fi
export RUSTC_BOOTSTRAP=1
# Seed corpora from the byte-exact stream fixtures and a few request bodies.
mkdir -p fuzz/corpus/sse_meter fuzz/corpus/prompt_extract fuzz/corpus/request_framing fuzz/corpus/upstream_response
for fixture in tests/fixtures/*/*.sse tests/fixtures/*/*.ndjson; do
    [ -f "$fixture" ] || continue
    # Selector byte 0 (OpenAI chat, SSE) and a 7-byte frame step, then the stream.
    { printf '\x00\x07'; cat "$fixture"; } > "fuzz/corpus/sse_meter/$(basename "$fixture")"
done
printf '%s' '{"model":"m","stream":true,"messages":[{"role":"user","content":"Hi \u00e9"}]}' > fuzz/corpus/prompt_extract/chat.json
printf '%s' '{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":false}}' > fuzz/corpus/prompt_extract/completions.json
# Cut byte, then a pipeline: a content-length request, a chunked one with a trailer, a smuggling one.
printf '\x21POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2;x\r\n{}\r\n0\r\nT: 1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' > fuzz/corpus/request_framing/pipeline.http
# Cut byte, then a vLLM stream response: interim 100, chunked SSE with an extension and a trailer.
printf '\x40HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\ne;x=1\r\ndata: {"a":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\nT: 1\r\n\r\n' > fuzz/corpus/upstream_response/stream.http
for target in "${targets[@]}"; do
    echo "== fuzzing $target for ${seconds}s"
    cargo fuzz run --fuzz-dir fuzz "$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1
done
