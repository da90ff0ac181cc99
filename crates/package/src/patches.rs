//! Keeping the hook patches of a package between runs.
//!
//! Each new hook patch is applied strictly by [`compute_values`](crate::compute_values) (an
//! operation on a missing path fails the hook). What lifecycle stores is the compacted list of
//! all accepted operations ([`compact_patches`]); when the lower layers change (new settings, a new
//! package version) the list is replayed leniently ([`replay_patches`]), skipping operations whose paths
//! no longer exist, because the hook that wrote them cannot be asked again.

use json_patch::Patch;
use serde_json::Value;

/// Keeps only the last operation per path, in the order those last operations were made.
pub fn compact_patches(patches: &Patch) -> Patch {
    let ops = &patches.0;
    let kept = ops
        .iter()
        .enumerate()
        .filter(|(i, op)| !ops[i + 1..].iter().any(|later| later.path() == op.path()))
        .map(|(_, op)| op.clone())
        .collect();
    Patch(kept)
}

/// Applies each operation on its own, skipping (and logging) those that no longer apply.
/// Returns how many operations were skipped.
pub fn replay_patches(values: &mut Value, patches: &Patch) -> usize {
    let mut skipped = 0;
    for op in &patches.0 {
        if let Err(error) = json_patch::patch(values, std::slice::from_ref(op)) {
            tracing::debug!(path = %op.path(), %error, "skipping a stored values patch that no longer applies");
            skipped += 1;
        }
    }
    skipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(ops: Value) -> Patch {
        serde_json::from_value(ops).expect("valid patch")
    }

    #[test]
    fn compaction_keeps_the_last_operation_per_path() {
        let ops = patch(json!([
            {"op": "add", "path": "/a", "value": 1},
            {"op": "add", "path": "/b", "value": 1},
            {"op": "replace", "path": "/a", "value": 2}
        ]));
        assert_eq!(
            compact_patches(&ops),
            patch(
                json!([{"op": "add", "path": "/b", "value": 1}, {"op": "replace", "path": "/a", "value": 2}])
            )
        );
    }

    #[test]
    fn replay_skips_operations_that_no_longer_apply() {
        let mut values = json!({"a": 1});
        let ops = patch(json!([
            {"op": "remove", "path": "/gone"},
            {"op": "add", "path": "/b", "value": 2},
            {"op": "replace", "path": "/missing/x", "value": 3}
        ]));
        assert_eq!(replay_patches(&mut values, &ops), 2);
        assert_eq!(values, json!({"a": 1, "b": 2}));
    }
}
