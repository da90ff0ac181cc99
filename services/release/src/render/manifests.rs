//! Turning rendered template text into objects: split on `---` document markers, drop empty
//! documents, separate hooks, and sort by Helm's install order.

use super::engine::RenderedFile;
use super::funcs::encoding::parse_yaml;
use super::{Manifest, RenderError};
use crate::order::install_rank;
use regex::Regex;
use std::sync::LazyLock;

/// Helm's document separator: `---` at the start of a line, with trailing whitespace.
static SEPARATOR: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?:^|\s*\n)---\s*").ok());

/// Splits one file into trimmed, non-empty documents.
pub fn split_documents(text: &str) -> Vec<String> {
    let trimmed = text.trim();
    let docs: Vec<&str> = match SEPARATOR.as_ref() {
        Some(re) => re.split(trimmed).collect(),
        None => vec![trimmed],
    };
    docs.into_iter()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(String::from)
        .collect()
}

/// Objects from the rendered files: `(manifests in install order, hooks)`.
pub fn objects(files: &[RenderedFile]) -> Result<(Vec<Manifest>, Vec<Manifest>), RenderError> {
    let mut manifests = Vec::new();
    let mut hooks = Vec::new();
    for file in files {
        for doc in split_documents(&file.text) {
            let object = parse_yaml(&doc).map_err(|message| RenderError::Yaml {
                template: file.name.clone(),
                message,
            })?;
            match &object {
                serde_json::Value::Null => continue,
                serde_json::Value::Object(_) => {}
                _ => {
                    return Err(RenderError::Yaml {
                        template: file.name.clone(),
                        message: "a document must be a mapping".into(),
                    });
                }
            }
            let m = Manifest {
                source: file.name.clone(),
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
    }
    // Stable: files arrive in name order, documents in file order.
    manifests.sort_by_key(|m| install_rank(m.kind()));
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
    }
}
