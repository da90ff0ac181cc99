//! Compaction, as shell-operator and addon-operator do it for hook runs, without knowing what
//! a hook run is.
//!
//! When a task with merge fields is leased, the queued tasks right behind it in the same queue
//! with the same kind and merge key are folded into it: their items are appended to its items,
//! so one run then sees all of them at once instead of starting once per event. Only
//! *consecutive* tasks are merged so the order of different work in a queue never changes.
//! After concatenation, adjacent items of the same `group` collapse to the last one: a group's
//! item carries complete state (berth's HookRun: a binding context with the group's snapshots)
//! and only the newest matters. What the items and the key mean is the producer's business
//! (`berth_proto::tasks`).

use super::model::{Merge, MergeItem};

/// Appends the items of a later task with the same key.
pub fn absorb(head: &mut Merge, later: Merge) {
    head.items.extend(later.items);
}

/// Keeps only the last of each run of adjacent items that share a non-empty `group`.
pub fn collapse_groups(items: Vec<MergeItem>) -> Vec<MergeItem> {
    let mut out: Vec<MergeItem> = Vec::with_capacity(items.len());
    for item in items {
        let same_group = out
            .last()
            .is_some_and(|prev| !prev.group.is_empty() && prev.group == item.group);
        if same_group {
            out.pop();
        }
        out.push(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(group: &str, n: u8) -> MergeItem {
        MergeItem {
            group: group.into(),
            data: vec![n],
        }
    }

    fn data(items: &[MergeItem]) -> Vec<u8> {
        items.iter().map(|i| i.data[0]).collect()
    }

    #[test]
    fn merges_items_in_order() {
        let mut head = Merge {
            key: "k".into(),
            items: vec![item("", 1)],
        };
        absorb(
            &mut head,
            Merge {
                key: "k".into(),
                items: vec![item("", 2), item("", 3)],
            },
        );
        assert_eq!(data(&head.items), [1, 2, 3]);
    }

    #[test]
    fn adjacent_items_of_one_group_reduce_to_the_last() {
        let items = vec![
            item("g", 1),
            item("g", 2),
            item("", 3),
            item("g", 4),
            item("x", 5),
        ];
        assert_eq!(data(&collapse_groups(items)), [2, 3, 4, 5]);
        let ungrouped = vec![item("", 1), item("", 2)];
        assert_eq!(data(&collapse_groups(ungrouped)), [1, 2]);
    }
}
