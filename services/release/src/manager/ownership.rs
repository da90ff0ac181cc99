//! Whose a release is. Every record berth writes names the package it belongs to (its key, and
//! for an App its namespace), under the record's MAC: a release is its first owner's for good.
//!
//! - A release with records of another package is refused to this one, naming the record:
//!   package keys differ by kind by construction (an App's is `<namespace>.<name>`, a Module's
//!   has no dot), so an App named like a Module can never take the Module's release over, even
//!   in the Module's namespace.
//! - A release with records but none of berth's is someone else's (Helm's, another tool's) when
//!   its newest record lacks berth's checksum label, and is refused naming that record. With
//!   the label it may be berth's own from before records carried MACs: it is upgraded (a new,
//!   MAC'ed revision after it), but nothing is pruned, repaired or uninstalled from it, and the
//!   new revision's description says so.

use super::*;

/// Refuses `owner`'s operation on `release` when its records say it is not `owner`'s.
pub(super) fn check(
    release: &ReleaseId,
    records: &Records,
    owner: &Owner,
) -> Result<(), ReleaseError> {
    if let Some(theirs) = records
        .own
        .iter()
        .find(|s| s.owner.package != owner.package)
    {
        return Err(ReleaseError::NotOwned(format!(
            "release {release} belongs to {} (its record {} says so), not to {}",
            theirs.owner.describe(),
            theirs.release.secret_name(),
            owner.describe()
        )));
    }
    if records.own.is_empty()
        && let Some(newest) = records.foreign.iter().max_by_key(|f| f.version)
        && !newest.berth_labelled
    {
        return Err(ReleaseError::NotOwned(format!(
            "release {release} was not made by berth: its record {newest} is Helm's or another \
             tool's, and berth takes over no release it did not make (uninstall it with the tool \
             that made it, or delete its records)"
        )));
    }
    Ok(())
}

/// What an upgrade says about the release's foreign records, if it has any: why nothing was
/// pruned from them (`pruned_from_own`: whether berth had a record to prune from).
pub(super) fn foreign_note(records: &Records, pruned_from_own: bool) -> Option<String> {
    if records.foreign.is_empty() {
        return None;
    }
    let which = records.describe_foreign();
    Some(if pruned_from_own {
        format!("records berth did not write were left alone: {which}")
    } else {
        format!(
            "nothing pruned: the earlier records are not berth's (written before records \
             carried MACs, or by someone else): {which}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Foreign;
    use crate::record::store::Stored;

    fn stored(package: &str, app: Option<&str>) -> Stored {
        let release: HelmRelease = serde_json::from_value(serde_json::json!({
            "name": "dns", "namespace": "berth-system", "version": 1, "manifest": "",
            "info": {"first_deployed": "", "last_deployed": "", "status": "deployed"},
            "chart": {"metadata": {}},
        }))
        .unwrap();
        Stored {
            release,
            checksum: Some("c".into()),
            resource_version: "1".into(),
            owner: Owner {
                package: package.into(),
                app_namespace: app.map(Into::into),
            },
        }
    }

    fn foreign(version: i32, berth_labelled: bool) -> Foreign {
        Foreign {
            secret: format!("sh.helm.release.v1.dns.v{version}"),
            version,
            berth_labelled,
            why: "no berth MAC",
            writer: None,
        }
    }

    fn app_named_like_the_module() -> Owner {
        Owner {
            package: "berth-system.dns".into(),
            app_namespace: Some("berth-system".into()),
        }
    }

    #[test]
    fn another_packages_release_is_refused_naming_its_record() {
        let release = ReleaseId::new("dns", "berth-system").unwrap();
        let records = Records {
            own: vec![stored("dns", None)],
            foreign: vec![],
        };
        let err = check(&release, &records, &app_named_like_the_module())
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to module dns"), "{err}");
        assert!(err.contains("sh.helm.release.v1.dns.v1"), "{err}");
        assert!(err.contains("not to app berth-system.dns"), "{err}");
        let module = Owner {
            package: "dns".into(),
            app_namespace: None,
        };
        assert!(check(&release, &records, &module).is_ok());
    }

    #[test]
    fn a_release_berth_did_not_make_is_refused_and_an_unsigned_berth_one_is_not() {
        let release = ReleaseId::new("dns", "berth-system").unwrap();
        let owner = Owner {
            package: "dns".into(),
            app_namespace: None,
        };
        let helms = Records {
            own: vec![],
            foreign: vec![foreign(1, true), foreign(2, false)],
        };
        let err = check(&release, &helms, &owner).unwrap_err().to_string();
        assert!(
            err.contains("sh.helm.release.v1.dns.v2 (no berth MAC)")
                && err.contains("not made by berth"),
            "{err}"
        );
        let berths_before_macs = Records {
            own: vec![],
            foreign: vec![foreign(1, true)],
        };
        assert!(check(&release, &berths_before_macs, &owner).is_ok());
        let note = foreign_note(&berths_before_macs, false).unwrap();
        assert!(
            note.starts_with("nothing pruned") && note.contains("v1"),
            "{note}"
        );
        // Once berth has a record of its own, foreign ones (forged beside it) are left alone.
        let forged_beside = Records {
            own: vec![stored("dns", None)],
            foreign: vec![foreign(9, false)],
        };
        assert!(check(&release, &forged_beside, &owner).is_ok());
        assert!(
            foreign_note(&forged_beside, true)
                .unwrap()
                .contains("left alone")
        );
        assert_eq!(foreign_note(&Records::default(), true), None);
    }
}
