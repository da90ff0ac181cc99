//! Renders the charts under `tests/fixtures/` and compares with the manifest `helm template`
//! prints for them (`<chart>.expected.yaml`, values from `<chart>.values.json`).

use berth_release::ReleaseInfo;
use berth_release::render::manifests::manifest_text;
use std::path::Path;

fn read_chart(dir: &Path, root: &Path, out: &mut Vec<(String, Vec<u8>)>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            read_chart(&path, root, out)?;
        } else {
            let rel = path
                .strip_prefix(root)?
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read(&path)?));
        }
    }
    Ok(())
}

fn render_fixture(name: &str) -> anyhow::Result<(String, String)> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files = Vec::new();
    read_chart(&base.join(name), &base.join(name), &mut files)?;
    let values: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        base.join(format!("{name}.values.json")),
    )?)?;
    let release = ReleaseInfo {
        name: "demo".into(),
        namespace: "default".into(),
        revision: 1,
        is_install: true,
        is_upgrade: false,
    };
    let manifests = berth_release::render_chart(&files, &values, &release)?;
    let expected = std::fs::read_to_string(base.join(format!("{name}.expected.yaml")))?;
    Ok((manifest_text(&manifests), expected))
}

#[test]
fn helm_create_chart_renders_like_helm_template() -> anyhow::Result<()> {
    let (got, want) = render_fixture("hello")?;
    assert_eq!(got, want);
    Ok(())
}
