//! `values.schema.json`: like Helm, the values each chart's templates will see are validated
//! against that chart's schema before rendering, and every violation is reported with its
//! JSON path.

use super::RenderError;
use super::values::Scope;

/// Collects schema violations over the chart tree; one error lists them all.
pub fn validate(root: &Scope<'_>) -> Result<(), RenderError> {
    let mut problems = Vec::new();
    check(root, root.chart.name(), &mut problems)?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(RenderError::Values(format!(
        "values don't meet the specifications of the schema(s):\n{}",
        problems.join("\n")
    )))
}

fn check(scope: &Scope<'_>, path: &str, problems: &mut Vec<String>) -> Result<(), RenderError> {
    if let Some(bytes) = &scope.chart.schema {
        let schema: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| RenderError::Chart(format!("{path}/values.schema.json: {e}")))?;
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| RenderError::Chart(format!("{path}/values.schema.json: {e}")))?;
        for err in validator.iter_errors(&scope.values) {
            let at = err.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            problems.push(format!("- {path}: {at}: {err}"));
        }
    }
    for sub in &scope.subcharts {
        check(sub, &format!("{path}/charts/{}", sub.name), problems)?;
    }
    Ok(())
}
