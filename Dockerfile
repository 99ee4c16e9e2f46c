# Herald container image: one `herald` binary on Debian 12 slim.
#
#   docker build -t herald:latest .
#   docker run --rm -p 8080:8080 -v herald-data:/data herald:latest      # a one-node cluster
#
# A multi-node cluster needs each node's own flags (--node-id, a --raft-addr its peers can reach,
# --initial-cluster): see docker-compose.yml and docs/clustering.md.
#
# Works with the classic builder and with BuildKit (docker-compose 1.29 uses the classic one), so
# dependency caching is done with layers rather than cache mounts.

# ---- build ------------------------------------------------------------------------------------
FROM rust:1-bookworm AS build

# rocksdb's bindings are generated with bindgen at build time: it needs libclang and clang.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libclang-dev clang \
    && rm -rf /var/lib/apt/lists/*

# The repository's release profile keeps line-level debug info for profiling (a ~500 MB
# binary); the image does not need it.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    CARGO_TERM_COLOR=never

WORKDIR /src

# 1. Dependencies only (RocksDB's C++ above all, the slow part): this layer is reused for as long
#    as the manifests and Cargo.lock do not change. Placeholder sources for the workspace's
#    crates (crates/*: one per layer) and the binary build every dependency.
COPY Cargo.toml Cargo.lock ./
COPY crates/herald-api/Cargo.toml crates/herald-api/
COPY crates/herald-broker/Cargo.toml crates/herald-broker/
COPY crates/herald-client/Cargo.toml crates/herald-client/
COPY crates/herald-cluster/Cargo.toml crates/herald-cluster/
COPY crates/herald-domain/Cargo.toml crates/herald-domain/
COPY crates/herald-raft/Cargo.toml crates/herald-raft/
COPY crates/herald-rpc/Cargo.toml crates/herald-rpc/
COPY crates/herald-storage/Cargo.toml crates/herald-storage/
COPY crates/herald-telemetry/Cargo.toml crates/herald-telemetry/
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && for crate in crates/*/; do mkdir "$crate/src" && touch "$crate/src/lib.rs"; done \
    && cargo build --release --locked --bin herald \
    && rm -rf src crates/*/src

# 2. Herald itself. Forget the placeholders' artifacts, so cargo cannot take them for current
#    whatever the copied files' timestamps are.
COPY src ./src
COPY crates ./crates
# The example pages and the web console's build are compiled into the binary.
COPY examples ./examples
COPY web-console/dist ./web-console/dist
RUN rm -rf target/release/.fingerprint/herald* target/release/deps/herald* \
        target/release/deps/libherald* target/release/herald \
    && cargo build --release --locked --bin herald \
    && install -m 0755 target/release/herald /usr/local/bin/herald

# ---- run --------------------------------------------------------------------------------------
# The binary links only glibc, libstdc++ and libgcc_s (RocksDB is C++), all present in
# bookworm-slim. It speaks plain HTTP and makes no TLS connections, so no ca-certificates.
FROM debian:bookworm-slim

RUN groupadd --system --gid 10001 herald \
    && useradd --system --uid 10001 --gid herald --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin herald \
    && mkdir /data \
    && chown herald:herald /data

COPY --from=build /usr/local/bin/herald /usr/local/bin/herald

USER herald
WORKDIR /data
# A named volume mounted here starts with this directory's owner (herald).
VOLUME ["/data"]

# 8080: the client HTTP API. 7000: internal raft RPC between nodes (never publish it publicly).
EXPOSE 8080 7000

ENV RUST_LOG=info

# The binary is its own HTTP client: a node that answers the topic list is up. Assumes the HTTP
# API on port 8080, as in CMD and docker-compose.yml.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD herald topics list --server http://127.0.0.1:8080 >/dev/null || exit 1

# herald handles SIGTERM itself (graceful shutdown), so it can run as PID 1.
ENTRYPOINT ["herald"]
# A standalone one-node cluster. Binding raft to 0.0.0.0 is fine only here: raft_addr is also the
# address peers are told to reach a node at, so every clustered node passes its own reachable
# --raft-addr (e.g. herald1:7000) instead, as docker-compose.yml does.
CMD ["serve", "--http-addr", "0.0.0.0:8080", "--raft-addr", "0.0.0.0:7000", "--data-dir", "/data", "--insecure"]
