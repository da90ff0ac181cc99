//! Renders the charts under `tests/fixtures/` and compares with the manifest `helm template`
//! prints for them (`<chart>.expected.yaml`, values from `<chart>.values.json`).

use berth_helm::template::{self, TemplateOptions};
use std::path::Path;

/// `helm template demo <chart> -f <chart>.values.json` as berth prints it, and the stored
/// output of helm 4 for the same command.
fn render_fixture(name: &str) -> anyhow::Result<(String, String)> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let opts = TemplateOptions {
        release_name: "demo".into(),
        namespace: "default".into(),
        values_files: vec![base.join(format!("{name}.values.json"))],
        ..TemplateOptions::default()
    };
    let got = template::template(&base.join(name), &opts)?;
    let expected = std::fs::read_to_string(base.join(format!("{name}.expected.yaml")))?;
    Ok((got, expected))
}

#[test]
fn helm_create_chart_renders_like_helm_template() -> anyhow::Result<()> {
    let (got, want) = render_fixture("hello")?;
    assert_eq!(got, want);
    Ok(())
}
