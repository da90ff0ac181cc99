//! Turning rendered template text into objects: split on `---` document markers, drop empty
//! documents, separate hooks, and sort by Helm's install order.

use super::engine::RenderedFile;
use super::funcs::encoding::parse_yaml;
use super::{Manifest, RenderError};
use crate::order::install_rank;
use regex::Regex;
use std::sync::LazyLock;

/// Helm's document separator for chart API v1/v2: `---` after optional whitespace and a
/// newline (or at the very start), swallowing the whitespace that follows. Go's `\s` is
/// ASCII-only, hence the explicit class.
static SEPARATOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:^|[\t\n\x0C\r ]*\n)---[\t\n\x0C\r ]*").ok());

/// Splits one file into non-empty documents the way Helm 4 does: leading whitespace of the
/// file and of each document is dropped, trailing whitespace of the last document is kept
/// (it shows up in `helm template` output and the release's manifest).
pub fn split_documents(text: &str) -> Vec<String> {
    let trimmed = text.trim_start_matches(is_go_space);
    let docs: Vec<&str> = match SEPARATOR.as_ref() {
        Some(re) => re.split(trimmed).collect(),
        None => vec![trimmed],
    };
    docs.into_iter()
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_start_matches(is_go_space).to_string())
        .filter(|d| !d.is_empty())
        .collect()
}

/// Go's `unicode.IsSpace` for the ASCII range plus the Unicode spaces Rust also knows.
fn is_go_space(c: char) -> bool {
    c.is_whitespace()
}

/// Objects from the rendered files: `(manifests in install order, hooks)`.
pub fn objects(files: &[RenderedFile]) -> Result<(Vec<Manifest>, Vec<Manifest>), RenderError> {
    let docs: Vec<(&str, String)> = files
        .iter()
        .flat_map(|f| {
            split_documents(&f.text)
                .into_iter()
                .map(move |d| (f.name.as_str(), d))
        })
        .collect();
    let parsed: Vec<_> = docs.iter().map(|(_, d)| parse_yaml(d)).collect();
    let mut manifests = Vec::new();
    let mut hooks = Vec::new();
    for ((name, doc), object) in docs.into_iter().zip(parsed) {
        let object = object.map_err(|message| RenderError::Yaml {
            template: name.to_string(),
            message,
        })?;
        match &object {
            serde_json::Value::Null => continue,
            serde_json::Value::Object(_) => {}
            _ => {
                return Err(RenderError::Yaml {
                    template: name.to_string(),
                    message: "a document must be a mapping".into(),
                });
            }
        }
        let m = Manifest {
            source: name.to_string(),
            object,
            text: doc,
        };
        if m.object
            .pointer("/metadata/annotations/helm.sh~1hook")
            .is_some()
        {
            hooks.push(m);
        } else {
            manifests.push(m);
        }
    }
    // Stable: files arrive in name order, documents in file order.
    manifests.sort_by_key(|m| install_rank(m.kind()));
    hooks.sort_by_key(|m| install_rank(m.kind()));
    Ok((manifests, hooks))
}

/// The release's `manifest` text as Helm records it.
pub fn manifest_text(manifests: &[Manifest]) -> String {
    manifests
        .iter()
        .map(|m| format!("---\n# Source: {}\n{}\n", m.source, m.text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_document_markers_and_drops_empty_docs() {
        let docs = split_documents("\n---\na: 1\n---   \n\nb: 2\nc: '---'\n---\n");
        assert_eq!(docs, vec!["a: 1".to_string(), "b: 2\nc: '---'".to_string()]);
        let kept = split_documents("  \na: 1\n\n---\nb: 2  \n\n");
        assert_eq!(kept, vec!["a: 1".to_string(), "b: 2  \n\n".to_string()]);
    }
}
