# One image holds every berth binary; docker-compose.yml picks the command per service.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --workspace --bins

FROM debian:bookworm-slim
# jq and bash: shell hooks written for shell-operator expect them.
RUN apt-get update && apt-get install -y --no-install-recommends jq bash ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/berth /src/target/release/berth-gateway \
    /src/target/release/berth-lifecycle /src/target/release/berth-queue \
    /src/target/release/berth-hookevent /src/target/release/berth-release \
    /src/target/release/berth-devcluster /src/target/release/berth-hook-exec /usr/local/bin/
WORKDIR /var/lib/berth
