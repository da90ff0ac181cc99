//! The repositories PackageRepository resources define, as the controller put them: read by
//! the Updates and GetSpecs that name them.

use berth_proto::lifecycle::repository_definition::Source;
use berth_proto::lifecycle::{RegistryCredentials, RepositoryDefinition};
use sqlx::Row as _;

use super::{Store, StoreError};

/// Most repositories resources may define (as many as a repositories file may name).
pub const MAX_DEFINED: i64 = berth_package::MAX_REPOSITORIES as i64;

impl Store {
    /// Stores `def` under its name (replacing what was there). Refused past [`MAX_DEFINED`].
    pub async fn put_repository(&self, def: &RepositoryDefinition) -> Result<bool, StoreError> {
        let (kind, location) = match &def.source {
            Some(Source::Directory(d)) => ("directory", d.as_str()),
            Some(Source::ArchiveUrl(u)) => ("archive_url", u.as_str()),
            Some(Source::Oci(o)) => ("oci", o.as_str()),
            None => ("", ""),
        };
        let (username, password) = match &def.credentials {
            Some(c) => (Some(c.username.as_str()), Some(c.password.as_str())),
            None => (None, None),
        };
        let mut tx = self.pool.begin().await?;
        let known: i64 = sqlx::query("SELECT COUNT(*) AS n FROM repositories WHERE name <> $1")
            .bind(&def.name)
            .fetch_one(&mut *tx)
            .await?
            .get("n");
        if known >= MAX_DEFINED {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO repositories (name, kind, location, plain_http, username, password) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET kind = $2, \
             location = $3, plain_http = $4, username = $5, password = $6",
        )
        .bind(&def.name)
        .bind(kind)
        .bind(location)
        .bind(i64::from(def.plain_http))
        .bind(username)
        .bind(password)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Forgets a defined repository; whether there was one.
    pub async fn delete_repository(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM repositories WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The definition stored under `name`, if any.
    pub async fn repository(&self, name: &str) -> Result<Option<RepositoryDefinition>, StoreError> {
        let row = sqlx::query(
            "SELECT name, kind, location, plain_http, username, password FROM repositories \
             WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| definition(&row)).transpose()
    }

    /// Every stored definition (at most [`MAX_DEFINED`]), by name.
    pub async fn repositories(&self) -> Result<Vec<RepositoryDefinition>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, kind, location, plain_http, username, password FROM repositories \
             ORDER BY name LIMIT $1",
        )
        .bind(MAX_DEFINED)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(definition).collect()
    }
}

fn definition(row: &sqlx::any::AnyRow) -> Result<RepositoryDefinition, StoreError> {
    let name: String = row.get("name");
    let kind: String = row.get("kind");
    let location: String = row.get("location");
    let source = match kind.as_str() {
        "directory" => Source::Directory(location),
        "archive_url" => Source::ArchiveUrl(location),
        "oci" => Source::Oci(location),
        other => {
            return Err(StoreError::Corrupt {
                key: format!("(repository {name})"),
                column: "kind",
                reason: format!("unknown kind {other:?}"),
            });
        }
    };
    let username: Option<String> = row.get("username");
    let password: Option<String> = row.get("password");
    Ok(RepositoryDefinition {
        name,
        source: Some(source),
        plain_http: row.get::<i64, _>("plain_http") != 0,
        credentials: username
            .zip(password)
            .map(|(username, password)| RegistryCredentials { username, password }),
    })
}
