//! Generates the gRPC code from `proto/**/*.proto` with protox, a pure-Rust protobuf compiler, so a
//! fresh machine needs no `protoc`. The same descriptor set is embedded for server reflection.

use std::path::PathBuf;

use prost::Message;

/// The public API: what the gateway serves and reflects.
const PUBLIC_PROTO: &str = "berth/v1/packages.proto";

const PROTOS: &[&str] = &[
    "berth/v1/packages.proto",
    "berth/lifecycle/v1/lifecycle.proto",
    "berth/queue/v1/queue.proto",
    "berth/hookevent/v1/hookevent.proto",
    "berth/release/v1/release.proto",
    "berth/tasks/v1/tasks.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let fds = protox::compile(PROTOS, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("berth_descriptor.bin"), fds.encode_to_vec())?;
    // The public API alone (with the well-known types it imports), for reflection on the
    // gateway's public port: internal services are not listed there.
    let public = protox::compile([PUBLIC_PROTO], [&root])?;
    std::fs::write(
        out.join("berth_public_descriptor.bin"),
        public.encode_to_vec(),
    )?;
    // berth's kind and binding-type names (`HookRun`, `Schedule`) are the variants' names,
    // derived rather than written out: the queue's `Task.kind`, merge keys, and the JSON
    // payloads of earlier versions (`tasks::legacy`) use them.
    let named = "#[derive(strum::IntoStaticStr, strum::EnumString, strum::EnumIter)]";
    tonic_prost_build::configure()
        .type_attribute(".berth.tasks.v1.TaskKind", named)
        .type_attribute(".berth.tasks.v1.BindingType", named)
        .type_attribute(".berth.tasks.v1.WebhookType", named)
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
