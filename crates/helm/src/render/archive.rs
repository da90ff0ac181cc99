//! Packed subcharts (`charts/<name>-<version>.tgz`, what `helm dependency update` writes):
//! a gzipped tar whose entries sit under one top directory named after the chart.
//!
//! Archives are untrusted input, so unpacking is bounded in entry count and total size, and
//! entries that are not plain files or whose paths escape the chart are refused.

use super::RenderError;

/// Most entries one packed subchart may hold.
const MAX_ENTRIES: usize = 10_000;
/// Most bytes one packed subchart may unpack to.
const MAX_UNPACKED: u64 = 64 << 20;

/// A chart directory name and its files relative to the chart root.
pub type Unpacked = (String, Vec<(String, Vec<u8>)>);

/// The archive's files relative to its chart root, and the chart's directory name.
pub fn unpack(archive_name: &str, bytes: &[u8]) -> Result<Unpacked, RenderError> {
    let bad = |why: String| RenderError::Chart(format!("{archive_name}: {why}"));
    let gz = flate2::read::GzDecoder::new(bytes);
    let mut tar = tar::Archive::new(std::io::Read::take(gz, MAX_UNPACKED + 1));
    let mut files = Vec::new();
    let mut top: Option<String> = None;
    let mut total: u64 = 0;
    let entries = tar.entries().map_err(|e| bad(e.to_string()))?;
    for (i, entry) in entries.enumerate() {
        if i >= MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let kind = entry.header().entry_type();
        if kind.is_dir() || kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| bad(e.to_string()))?
            .to_string_lossy()
            .replace('\\', "/");
        if !kind.is_file() {
            return Err(bad(format!("{path} is not a regular file")));
        }
        let (dir, rel) = path
            .trim_start_matches("./")
            .split_once('/')
            .ok_or_else(|| bad(format!("{path} is outside a chart directory")))?;
        if rel.split('/').any(|p| p == ".." || p.is_empty()) {
            return Err(bad(format!("{path} is not a clean relative path")));
        }
        match &top {
            Some(t) if t != dir => return Err(bad(format!("{path} is outside {t}/"))),
            Some(_) => {}
            None => top = Some(dir.to_string()),
        }
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).map_err(|e| bad(e.to_string()))?;
        total += data.len() as u64;
        if total > MAX_UNPACKED {
            return Err(bad(format!("unpacks to more than {MAX_UNPACKED} bytes")));
        }
        files.push((rel.to_string(), data));
    }
    let top = top.ok_or_else(|| bad("empty archive".into()))?;
    Ok((top, files))
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Builds a `.tgz` from `(path, content)` pairs.
    pub fn tgz(files: &[(&str, &str)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut builder = tar::Builder::new(gz);
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            let _ = builder.append_data(&mut header, path, content.as_bytes());
        }
        builder
            .into_inner()
            .and_then(|gz| gz.finish())
            .unwrap_or_default()
    }

    #[test]
    fn unpacks_under_the_top_directory() {
        let bytes = tgz(&[
            ("redis/Chart.yaml", "name: redis"),
            ("redis/templates/a.yaml", "x"),
        ]);
        let (top, files) = unpack("charts/redis-1.0.0.tgz", &bytes).unwrap_or_default();
        assert_eq!(top, "redis");
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, vec!["Chart.yaml", "templates/a.yaml"]);
    }

    #[test]
    fn refuses_escaping_paths() {
        let bytes = tgz(&[("redis/../../etc/passwd", "x")]);
        assert!(unpack("x.tgz", &bytes).is_err());
        assert!(unpack("x.tgz", b"not gzip").is_err());
    }
}
