//! Turning rendered template text into documents and objects: split on `---` document markers,
//! drop empty documents, separate hooks (dropping those of unknown events), and sort by Helm's
//! install order.

use super::engine::RenderedFile;
use super::funcs::encoding::parse_yaml;
use super::goyaml::{self, load::Head};
use super::{Manifest, RenderError};
use crate::order::install_rank;
use regex::Regex;
use std::borrow::Cow;
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

/// One rendered document as Helm lists it (in `helm template` output and the release's
/// manifest): where it came from, its kind, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The template it came from, e.g. `hello/templates/deployment.yaml`.
    pub source: String,
    /// `kind` as Helm reads it (empty for a document that is only comments or `null`).
    pub kind: String,
    pub text: String,
}

/// Everything `helm template` prints, without parsing the objects.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The `crds/` files as written (path with chart prefix, text), as `helm template
    /// --include-crds` prints them: one block per file, not per document.
    pub crd_files: Vec<(String, String)>,
    /// Documents that are not hooks, in install order. Unlike [`objects`], this keeps
    /// documents holding no object (only comments, or `null`), as Helm does.
    pub manifests: Vec<Document>,
    /// Hook documents, in install order.
    pub hooks: Vec<Document>,
    /// The top chart's rendered `templates/NOTES.txt` (empty without one).
    pub notes: String,
}

/// The hook events Helm knows; a document naming any other is dropped (Helm logs "skipping
/// unknown hooks" and neither installs nor prints it).
const HOOK_EVENTS: &[&str] = &[
    "pre-install",
    "post-install",
    "pre-delete",
    "post-delete",
    "pre-upgrade",
    "post-upgrade",
    "pre-rollback",
    "post-rollback",
    "test",
    "test-success",
];

/// Where Helm puts a document.
enum Place {
    Manifest,
    Hook,
    Dropped,
}

fn place(head: &Head) -> Place {
    match &head.hook {
        None => Place::Manifest,
        Some(types) => {
            let known = types
                .split(',')
                .all(|t| HOOK_EVENTS.contains(&t.trim().to_lowercase().as_str()));
            if known { Place::Hook } else { Place::Dropped }
        }
    }
}

/// A rendered document's text with carried bytes resolved (see `render::bytes`). Helm refuses
/// a document that is not UTF-8 when it reads it as YAML, and so does this, with a hint at the
/// usual cause.
fn utf8_document(template: &str, text: String) -> Result<String, RenderError> {
    match goyaml::load::utf8(&text) {
        Ok(Cow::Borrowed(_)) => Ok(text),
        Ok(Cow::Owned(resolved)) => Ok(resolved),
        Err(m) => Err(yaml_error(
            template,
            format!(
                "{m} (the template printed bytes that are not UTF-8, such as a binary file's \
                 content; encode them, e.g. with b64enc)"
            ),
        )),
    }
}

fn yaml_error(template: &str, message: String) -> RenderError {
    RenderError::Yaml {
        template: template.to_string(),
        message,
    }
}

/// The documents of the rendered files in `helm template`'s order: each is checked as Helm
/// checks it (it must read as a map, or hold nothing), but only its kind and hook annotation
/// are read.
pub fn listing(files: Vec<RenderedFile>) -> Result<(Vec<Document>, Vec<Document>), RenderError> {
    collect_checked(files.into_iter().map(check_file).collect())
}

/// One rendered file's documents, checked: `(file name, documents and where each goes)`.
pub type Checked = (String, Result<Vec<(Document, bool)>, RenderError>);

/// Splits and checks one rendered file (see [`listing`]); hooks of unknown events are left
/// out, and the flag tells hooks from manifests.
pub fn check_file(f: RenderedFile) -> Checked {
    let mut docs = Vec::new();
    for text in split_documents(&f.text) {
        let checked = utf8_document(&f.name, text).and_then(|text| {
            let head = goyaml::load::head(&text).map_err(|m| yaml_error(&f.name, m))?;
            Ok((text, head))
        });
        let (text, head) = match checked {
            Ok(checked) => checked,
            Err(e) => return (f.name, Err(e)),
        };
        let hook = match place(&head) {
            Place::Manifest => false,
            Place::Hook => true,
            Place::Dropped => continue,
        };
        docs.push((
            Document {
                source: f.name.clone(),
                kind: head.kind,
                text,
            },
            hook,
        ));
    }
    (f.name, Ok(docs))
}

/// Puts checked files together in Helm's order (by file name, then install order); the
/// first failure by file name is the error, as Helm reads files in name order.
pub fn collect_checked(
    mut checked: Vec<Checked>,
) -> Result<(Vec<Document>, Vec<Document>), RenderError> {
    checked.sort_by(|a, b| a.0.cmp(&b.0));
    let mut manifests = Vec::new();
    let mut hooks = Vec::new();
    for (_, docs) in checked {
        for (doc, hook) in docs? {
            if hook {
                hooks.push(doc);
            } else {
                manifests.push(doc);
            }
        }
    }
    // Stable: files in name order, documents in file order.
    manifests.sort_by_cached_key(|d| install_rank(&d.kind));
    hooks.sort_by_cached_key(|d| install_rank(&d.kind));
    Ok((manifests, hooks))
}

/// Objects from the rendered files: `(manifests in install order, hooks, listing)`. The
/// objects leave out documents that hold none; the listing (what Helm prints and records)
/// keeps them.
#[allow(clippy::type_complexity)]
pub fn objects(
    files: &[RenderedFile],
) -> Result<(Vec<Manifest>, Vec<Manifest>, (Vec<Document>, Vec<Document>)), RenderError> {
    let mut manifests = Vec::new();
    let mut hooks = Vec::new();
    let mut listed = Vec::new();
    let mut listed_hooks = Vec::new();
    for f in files {
        for text in split_documents(&f.text) {
            let text = utf8_document(&f.name, text)?;
            let object = parse_yaml(&text).map_err(|m| yaml_error(&f.name, m))?;
            let head = goyaml::load::head_of(&object).map_err(|m| yaml_error(&f.name, m))?;
            let doc = Document {
                source: f.name.clone(),
                kind: head.kind.clone(),
                text: text.clone(),
            };
            let (objects, docs) = match place(&head) {
                Place::Manifest => (&mut manifests, &mut listed),
                Place::Hook => (&mut hooks, &mut listed_hooks),
                Place::Dropped => continue,
            };
            docs.push(doc);
            if object.is_object() {
                objects.push((
                    head.kind,
                    Manifest {
                        source: f.name.clone(),
                        object,
                        text,
                    },
                ));
            }
        }
    }
    manifests.sort_by_cached_key(|(kind, _)| install_rank(kind));
    hooks.sort_by_cached_key(|(kind, _)| install_rank(kind));
    listed.sort_by_cached_key(|d| install_rank(&d.kind));
    listed_hooks.sort_by_cached_key(|d| install_rank(&d.kind));
    Ok((
        manifests.into_iter().map(|(_, m)| m).collect(),
        hooks.into_iter().map(|(_, m)| m).collect(),
        (listed, listed_hooks),
    ))
}

/// `helm template`'s text for documents: a `# Source:` block each.
pub fn documents_text(docs: &[Document]) -> String {
    let mut out = String::with_capacity(
        docs.iter()
            .map(|d| d.text.len() + d.source.len() + 16)
            .sum(),
    );
    for d in docs {
        out.push_str("---\n# Source: ");
        out.push_str(&d.source);
        out.push('\n');
        out.push_str(&d.text);
        out.push('\n');
    }
    out
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
    fn comment_only_documents_are_listed_but_hold_no_object_and_unknown_hooks_are_dropped() {
        let file = RenderedFile {
            name: "c/templates/a.yaml".into(),
            text: "# only a comment\n---\nkind: Secret\nmetadata:\n  annotations:\n    \
                   helm.sh/hook: pre-install,bogus\n---\nkind: Job\nmetadata:\n  \
                   annotations:\n    helm.sh/hook: ' Post-Install '\n---\nkind: ConfigMap\n"
                .into(),
        };
        let (objects, hooks, (listed, listed_hooks)) =
            objects(std::slice::from_ref(&file)).unwrap_or_else(|e| panic!("{e}"));
        let kinds = |docs: &[Document]| docs.iter().map(|d| d.kind.clone()).collect::<Vec<_>>();
        assert_eq!(kinds(&listed), vec!["ConfigMap".to_string(), String::new()]);
        assert_eq!(kinds(&listed_hooks), vec!["Job".to_string()]);
        assert_eq!(objects.len(), 1);
        assert_eq!(hooks.len(), 1);
        let (fast, fast_hooks) = listing(vec![file]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((fast, fast_hooks), (listed, listed_hooks));
    }

    #[test]
    fn splits_on_document_markers_and_drops_empty_docs() {
        let docs = split_documents("\n---\na: 1\n---   \n\nb: 2\nc: '---'\n---\n");
        assert_eq!(docs, vec!["a: 1".to_string(), "b: 2\nc: '---'".to_string()]);
        let kept = split_documents("  \na: 1\n\n---\nb: 2  \n\n");
        assert_eq!(kept, vec!["a: 1".to_string(), "b: 2  \n\n".to_string()]);
    }
}
