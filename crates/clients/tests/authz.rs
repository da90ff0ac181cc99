//! The authorisation table (`berth_runtime::authz`) names berth's internal RPCs as text, so the
//! runtime builds without the contracts; here, where the contracts are known, the text is held
//! to the compiled descriptor set.

use prost::Message;

/// The internal RPCs as the compiled protos declare them (`/package.Service/Method`).
fn internal_rpcs() -> Vec<String> {
    let set = prost_types::FileDescriptorSet::decode(berth_proto::FILE_DESCRIPTOR_SET)
        .expect("berth's descriptor set decodes");
    let internal = [
        "berth.queue.v1",
        "berth.lifecycle.v1",
        "berth.hookevent.v1",
        "berth.release.v1",
    ];
    let mut paths = Vec::new();
    for file in &set.file {
        let package = file.package();
        if !internal.contains(&package) {
            continue;
        }
        for service in &file.service {
            for method in &service.method {
                paths.push(format!("/{package}.{}/{}", service.name(), method.name()));
            }
        }
    }
    paths
}

#[test]
fn every_rpc_of_every_internal_service_is_in_the_table() {
    let paths = internal_rpcs();
    assert!(
        paths.len() > 20,
        "the walk found the internal RPCs: {paths:?}"
    );
    for path in &paths {
        assert!(
            berth_runtime::authz::access(path).is_some(),
            "{path} has no row"
        );
    }
    let stale: Vec<&str> = berth_runtime::authz::rpcs()
        .filter(|row| !paths.iter().any(|p| p == row))
        .collect();
    assert!(
        stale.is_empty(),
        "rows for RPCs that do not exist: {stale:?}"
    );
    assert_eq!(
        berth_runtime::authz::rpcs().count(),
        paths.len(),
        "one row per RPC"
    );
}
