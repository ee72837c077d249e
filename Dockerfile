# Multi-stage build of the karpenter-capi operator: a small, non-root runtime image.
#   docker build -t karpenter-capi:dev .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# jemalloc (the operator's allocator, tikv-jemalloc-sys) is built with make.
RUN apt-get update && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
RUN cargo build --release --locked --bin karpenter-capi \
    && strip target/release/karpenter-capi

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/karpenter-capi /usr/local/bin/karpenter-capi
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/karpenter-capi"]
CMD ["run"]
