//! The jq engine itself: jaq, a pure-Rust jq. It runs only inside the evaluator process
//! (`evaluator.rs`), never in the service: jaq has no bound on recursion depth, time or memory.

use jaq_core::data::JustLut;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, unwrap_valr};
use jaq_json::Val;
use serde::Deserialize;

/// A compiled jq program.
pub struct JqProgram {
    filter: jaq_core::Filter<JustLut<Val>>,
}

impl JqProgram {
    /// Parses and compiles `source`; the error says what is wrong (not naming the program: the
    /// caller does).
    pub fn compile(source: &str) -> Result<JqProgram, String> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let modules = loader
            .load(
                &arena,
                File {
                    code: source,
                    path: (),
                },
            )
            .map_err(|errors| {
                format!(
                    "does not compile: {} parse error(s): {:?}",
                    errors.len(),
                    first_errors(&errors)
                )
            })?;
        let filter = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errors| {
                format!(
                    "does not compile: {} compile error(s): {:?}",
                    errors.len(),
                    first_errors(&errors)
                )
            })?;
        Ok(JqProgram { filter })
    }

    /// Runs the program on the JSON text `input` and returns its result as JSON text: one output
    /// as is, no output as `null`, several outputs as an array (shell-operator's jq prints them
    /// one per line, which no consumer can tell apart from an array either). A result longer
    /// than `output_limit` bytes is an error naming the limit.
    pub fn run_json(&self, input: &[u8], output_limit: usize) -> Result<String, String> {
        let mut de = serde_json::Deserializer::from_slice(input);
        let input = Val::deserialize(&mut de).map_err(|e| format!("input: {e}"))?;
        let ctx = Ctx::<JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut outputs: Vec<String> = Vec::with_capacity(1);
        let mut size = 0;
        for out in self.filter.id.run((ctx, input)).map(unwrap_valr) {
            let val = out.map_err(|e| e.to_string())?;
            // `Val` prints as JSON.
            let text = val.to_string();
            size += text.len() + 1;
            if size > output_limit {
                return Err(format!(
                    "its output exceeds the limit of {output_limit} bytes"
                ));
            }
            outputs.push(text);
        }
        Ok(match outputs.len() {
            0 => "null".to_owned(),
            1 => outputs.pop().unwrap_or_default(),
            _ => format!("[{}]", outputs.join(",")),
        })
    }

    /// [`JqProgram::run_json`] on a value, for tests of what the engine computes (unbounded:
    /// never in a service).
    #[cfg(any(test, feature = "test-support"))]
    pub fn run(&self, input: &serde_json::Value) -> Result<serde_json::Value, String> {
        let text = self.run_json(input.to_string().as_bytes(), usize::MAX)?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }
}

fn first_errors<T: std::fmt::Debug>(errors: &[T]) -> String {
    errors
        .iter()
        .take(3)
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn filters_objects() {
        let p = JqProgram::compile(".metadata.labels.app // \"none\"").unwrap();
        assert_eq!(
            p.run(&json!({"metadata": {"labels": {"app": "web"}}}))
                .unwrap(),
            json!("web")
        );
        assert_eq!(p.run(&json!({"metadata": {}})).unwrap(), json!("none"));
        let many = JqProgram::compile(".items[]").unwrap();
        assert_eq!(many.run(&json!({"items": [1, 2]})).unwrap(), json!([1, 2]));
        let none = JqProgram::compile("empty").unwrap();
        assert_eq!(none.run(&json!({})).unwrap(), json!(null));
        let obj = JqProgram::compile("{name: .metadata.name, data: (.data | keys)}").unwrap();
        assert_eq!(
            obj.run(&json!({"metadata": {"name": "a"}, "data": {"y": 1, "x": 2}}))
                .unwrap(),
            json!({"name": "a", "data": ["x", "y"]})
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = JqProgram::compile(".[").err().unwrap();
        assert!(e.contains("does not compile"), "{e}");
        let p = JqProgram::compile(".a + 1").unwrap();
        let e = p.run(&json!({"a": "x"})).unwrap_err();
        assert!(e.contains("cannot"), "{e}");
    }

    #[test]
    fn output_is_bounded() {
        let p = JqProgram::compile("range(100)").unwrap();
        let e = p.run_json(b"null", 50).unwrap_err();
        assert!(e.contains("limit of 50 bytes"), "{e}");
        assert_eq!(p.run_json(b"null", 1000).unwrap().len(), 291);
    }
}
