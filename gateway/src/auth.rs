//! Who may call the public API: bearer tokens, from files and the environment only (a command
//! line is readable by every process on the machine, `/proc/<pid>/cmdline`).
//!
//! The gateway always requires a token (see docs/decisions/gateway-authentication.md):
//! `berth up` generates one into its data directory (0600, kept across restarts) and the CLI
//! finds it there, as kubectl finds its kubeconfig; `berth-gateway` refuses to start without
//! one. A call is attributed to the token it presented (its position among the accepted
//! ones), which is what the rate limiter keys on (see [`crate::limits`]).

use std::path::{Path, PathBuf};

/// The file in `berth up`'s data directory holding the token it accepts and the CLI sends.
pub const TOKEN_FILE: &str = "token";

/// The environment variable holding a token (the CLI sends it; `berth up` and
/// `berth-gateway` accept it).
pub const TOKEN_ENV: &str = "BERTH_TOKEN";

/// What a `--token VALUE` on a command line gets: a refusal that says where the token goes
/// instead.
pub const TOKEN_FLAG_REFUSED: &str = "--token puts the token on the command line, where every process on this machine can read it (/proc/<pid>/cmdline); put it in a file only you can read and give --token-file FILE (env BERTH_TOKEN_FILE), or set BERTH_TOKEN";

/// The tokens a gateway accepts; at least one.
#[derive(Clone)]
pub struct Tokens {
    /// `Bearer <token>`, as the header carries it.
    expected: std::sync::Arc<Vec<String>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} accepted)", self.expected.len())
    }
}

/// A caller whose token matched: the position of its token among the accepted ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verified(pub usize);

/// Why a call is not authenticated (answered `Unauthenticated` by the gateway's layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("missing bearer token (authorization: Bearer <token>)")]
    Missing,
    #[error("invalid bearer token")]
    Invalid,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no bearer token configured: give --token-file FILE or set BERTH_TOKEN (the public API is never served without authentication)"
    )]
    Missing,
    #[error("a token must be printable ASCII without spaces")]
    Malformed,
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

impl Tokens {
    /// The tokens `tokens` (duplicates count once); refused when there are none or one could
    /// not be sent in a header.
    pub fn new(tokens: Vec<String>) -> Result<Tokens, TokenError> {
        let mut expected: Vec<String> = Vec::with_capacity(tokens.len());
        for t in tokens {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(TokenError::Malformed);
            }
            let header = format!("Bearer {t}");
            if !expected.contains(&header) {
                expected.push(header);
            }
        }
        if expected.is_empty() {
            return Err(TokenError::Missing);
        }
        Ok(Tokens {
            expected: std::sync::Arc::new(expected),
        })
    }

    /// Which accepted token the `authorization` header carries, or why none.
    pub fn verify(&self, headers: &http::HeaderMap) -> Result<Verified, Refused> {
        let Some(given) = headers.get(http::header::AUTHORIZATION) else {
            return Err(Refused::Missing);
        };
        // Every accepted token is compared, each in constant time, so the time taken does not
        // tell how much of a guess was right.
        let mut matched = None;
        for (i, e) in self.expected.iter().enumerate() {
            if same(e.as_bytes(), given.as_bytes()) && matched.is_none() {
                matched = Some(i);
            }
        }
        matched.map(Verified).ok_or(Refused::Invalid)
    }
}

/// Equal contents, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The tokens in a token file: one per line; blank lines and lines starting with `#` are
/// skipped. A file without any token is an error.
pub fn read_tokens(path: &Path) -> Result<Vec<String>, TokenError> {
    let file_error = |message: String| TokenError::File {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        return Err(file_error("no token in the file".into()));
    }
    Ok(tokens)
}

/// The token from `BERTH_TOKEN`, when it is set and not empty.
pub fn token_from_env() -> Option<String> {
    std::env::var(TOKEN_ENV)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// `berth up`'s own token: `<data_dir>/token`, generated the first time (32 random bytes as
/// hex, created 0600 and exclusively) and read back on every start (tightened to 0600 if its
/// mode was widened).
pub fn load_or_generate(data_dir: &Path) -> Result<(PathBuf, String), TokenError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = data_dir.join(TOKEN_FILE);
    let file_error = |e: std::io::Error| TokenError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        // O_EXCL: a link in its place (even a dangling one) is not followed.
        .open(&path)
    {
        Ok(mut file) => {
            let mut raw = [0u8; 32];
            rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut raw)
                .map_err(|e| file_error(std::io::Error::other(e.to_string())))?;
            file.write_all(format!("{}\n", hex::encode(raw)).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(file_error)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Kept across restarts; a link is not followed (the data directory is the
            // owner's, but its token must be the file berth made).
            let meta = std::fs::symlink_metadata(&path).map_err(file_error)?;
            if !meta.is_file() {
                return Err(TokenError::File {
                    path: path.display().to_string(),
                    message: "not a regular file; remove it and berth up writes a new token".into(),
                });
            }
            berth_devcluster::private::tighten_or_create_private(&path).map_err(file_error)?;
        }
        Err(e) => return Err(file_error(e)),
    }
    let token = read_tokens(&path)?
        .into_iter()
        .next()
        .expect("read_tokens answers at least one");
    Ok((path, token))
}

/// Where a CLI's token came from, for its messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    File(PathBuf),
    Env,
    /// `berth up`'s token file at its default place (`$BERTH_DATA_DIR/token` or
    /// `.berth/token`).
    DataDir(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::File(p) => write!(f, "--token-file {}", p.display()),
            TokenSource::Env => f.write_str("BERTH_TOKEN"),
            TokenSource::DataDir(p) => write!(f, "berth up's token file {}", p.display()),
        }
    }
}

/// `berth up`'s token file where a `berth up` started here with its default data directory
/// (`BERTH_DATA_DIR`, or `.berth`) keeps it.
pub fn default_token_file() -> PathBuf {
    let data = std::env::var_os("BERTH_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(".berth"), PathBuf::from);
    data.join(TOKEN_FILE)
}

/// The token the CLI sends, found as kubectl finds its kubeconfig: `--token-file` (or
/// `BERTH_TOKEN_FILE`), else `BERTH_TOKEN`, else — for a server on this machine — the token
/// file of a `berth up` started here ([`default_token_file`]), when there is one. `None`: no
/// token anywhere (the server will say so).
pub fn find_cli_token(
    token_file: Option<&Path>,
    local_server: bool,
) -> Result<Option<(String, TokenSource)>, TokenError> {
    if let Some(path) = token_file {
        let token = read_tokens(path)?.into_iter().next().expect("one at least");
        return Ok(Some((token, TokenSource::File(path.to_path_buf()))));
    }
    if let Some(token) = token_from_env() {
        return Ok(Some((token, TokenSource::Env)));
    }
    if !local_server {
        return Ok(None);
    }
    let path = default_token_file();
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => {
            let token = read_tokens(&path)?
                .into_iter()
                .next()
                .expect("one at least");
            Ok(Some((token, TokenSource::DataDir(path))))
        }
    }
}

/// What to add to an `Unauthenticated` answer so the user knows where the CLI looked.
pub fn unauthenticated_hint(source: Option<&TokenSource>) -> String {
    match source {
        Some(source) => format!("the token from {source} was refused"),
        None => format!(
            "the CLI found no token: give --token-file FILE (env BERTH_TOKEN_FILE) or set BERTH_TOKEN; `berth up` writes its token to <data-dir>/token and the CLI reads {} when the server is on this machine",
            default_token_file().display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(v) = value {
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_call_is_attributed_to_the_token_it_presents() {
        let tokens = Tokens::new(vec!["alpha".into(), "beta".into(), "alpha".into()]).unwrap();
        assert_eq!(
            tokens.verify(&headers(Some("Bearer beta"))).unwrap(),
            Verified(1)
        );
        assert_eq!(
            tokens.verify(&headers(Some("Bearer alpha"))).unwrap(),
            Verified(0)
        );
        for bad in ["Bearer gamma", "alpha", "Bearer alph"] {
            let err = tokens.verify(&headers(Some(bad))).unwrap_err();
            assert_eq!(err, Refused::Invalid, "{bad:?}");
        }
        assert_eq!(tokens.verify(&headers(None)).unwrap_err(), Refused::Missing);
    }

    #[test]
    fn no_token_or_a_malformed_one_is_refused() {
        assert!(matches!(Tokens::new(vec![]), Err(TokenError::Missing)));
        assert!(matches!(
            Tokens::new(vec!["a b".into()]),
            Err(TokenError::Malformed)
        ));
    }

    #[test]
    fn berth_ups_token_is_private_random_and_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (path, first) = load_or_generate(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("token"));
        assert_eq!(first.len(), 64, "{first}");
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, again) = load_or_generate(dir.path()).unwrap();
        assert_eq!(again, first, "kept across restarts");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "tightened again");
        let other = tempfile::tempdir().unwrap();
        assert_ne!(load_or_generate(other.path()).unwrap().1, first);
    }

    #[test]
    fn a_link_in_place_of_the_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("elsewhere"), "planted\n").unwrap();
        std::os::unix::fs::symlink("elsewhere", dir.path().join("token")).unwrap();
        let err = load_or_generate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn the_cli_takes_a_token_file_first_and_its_first_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# ops\nfirst\nsecond\n").unwrap();
        let (token, source) = find_cli_token(Some(&file), false).unwrap().unwrap();
        assert_eq!(token, "first");
        assert_eq!(source, TokenSource::File(file.clone()));
        let err = find_cli_token(Some(&dir.path().join("missing")), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
