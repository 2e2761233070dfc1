# syntax=docker/dockerfile:1
# tokenmeter container image: the slim sidecar build (`serve` only: no testbed, so none of the
# simulator's, load generator's or demo's code and dependencies) on a distroless, non-root runtime,
# without its debug info (18.0 MB instead of 82.9 MB, measured in docs/deploying.md's "The slim
# sidecar build"; function names stay, for panic backtraces).
#   docker build -t tokenmeter:0.1.0 .
#   docker run --rm -p 8000:8000 -p 9464:9464 -e TOKENMETER_UPSTREAM=http://vllm:8001 tokenmeter:0.1.0
# The debug info of the same build, for perf / gdb / addr2line (they find tokenmeter.debug beside
# the binary, or by the build id both carry):
#   docker build --target debuginfo --output type=local,dest=./debug .
# The image listens on 0.0.0.0:8000 (traffic) and 0.0.0.0:9464 (admin: /metrics, /healthz, /readyz).
# Those come from TOKENMETER_LISTEN / TOKENMETER_ADMIN_LISTEN below, which win over a config
# file's [server] listen keys: change the ports with -e, not in the file.

# --- build -----------------------------------------------------------------------------------
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, in their own layer: a source-only change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --no-default-features --bin tokenmeter \
    && rm -rf src
COPY src ./src
COPY config ./config
COPY scripts/split-debuginfo.sh ./scripts/
# touch: make cargo see the real sources as newer than the placeholder build. The split (what
# .ci/run checks on the same build) writes /out/tokenmeter and /out/tokenmeter.debug.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --no-default-features --bin tokenmeter \
    && (command -v objcopy >/dev/null \
        || (apt-get update && apt-get install -y --no-install-recommends binutils)) \
    && scripts/split-debuginfo.sh target/release/tokenmeter /out

# --- debug info (not shipped) ----------------------------------------------------------------
FROM scratch AS debuginfo
COPY --from=build /out/tokenmeter.debug /tokenmeter.debug

# --- runtime ---------------------------------------------------------------------------------
# distroless/cc: glibc and libgcc only, no shell, no package manager; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/tokenmeter /usr/local/bin/tokenmeter
COPY --from=build /src/config/tokenmeter.toml /etc/tokenmeter/tokenmeter.toml
ENV TOKENMETER_LISTEN=0.0.0.0:8000 \
    TOKENMETER_ADMIN_LISTEN=0.0.0.0:9464 \
    RUST_LOG=info
EXPOSE 8000 9464
USER 65532:65532
# SIGTERM (the default stop signal) drains: /readyz turns 503, streams in flight may finish for
# [server] shutdown_grace; give `docker stop -t` / terminationGracePeriodSeconds more than that.
ENTRYPOINT ["/usr/local/bin/tokenmeter"]
CMD ["serve", "--config", "/etc/tokenmeter/tokenmeter.toml"]
