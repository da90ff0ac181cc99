//! jq programs (`jqFilter` of kubernetes bindings, `JQPatch` operations) run with jaq, a pure-Rust
//! jq: compiled once when a binding is registered, then run on every object the watch delivers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use jaq_core::data::JustLut;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, unwrap_valr};
use jaq_json::Val;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum JqError {
    #[error("jq program {program:?} does not compile: {reason}")]
    Compile { program: String, reason: String },
    #[error("jq program {program:?} failed: {reason}")]
    Run { program: String, reason: String },
}

/// A compiled jq program.
pub struct JqProgram {
    source: String,
    filter: jaq_core::Filter<JustLut<Val>>,
}

impl std::fmt::Debug for JqProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JqProgram")
            .field("source", &self.source)
            .finish()
    }
}

impl JqProgram {
    pub fn compile(source: &str) -> Result<JqProgram, JqError> {
        let error = |reason: String| JqError::Compile {
            program: source.to_owned(),
            reason,
        };
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
                error(format!(
                    "{} parse error(s): {:?}",
                    errors.len(),
                    first_errors(&errors)
                ))
            })?;
        let filter = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errors| {
                error(format!(
                    "{} compile error(s): {:?}",
                    errors.len(),
                    first_errors(&errors)
                ))
            })?;
        Ok(JqProgram {
            source: source.to_owned(),
            filter,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Runs the program on `input`. One output is returned as is; no output is `null`; several
    /// outputs are returned as an array (shell-operator's jq prints them one per line, which
    /// no consumer can tell apart from an array either).
    pub fn run(&self, input: &Value) -> Result<Value, JqError> {
        self.run_on(&JqInput::new(input))
    }

    /// Like [`JqProgram::run`], on an input converted once for several programs.
    pub fn run_on(&self, input: &JqInput) -> Result<Value, JqError> {
        let error = |reason: String| JqError::Run {
            program: self.source.clone(),
            reason,
        };
        let input = input.0.clone().map_err(|e| error(format!("input: {e}")))?;
        let ctx = Ctx::<JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut outputs = Vec::with_capacity(1);
        for out in self.filter.id.run((ctx, input)).map(unwrap_valr) {
            let val = out.map_err(|e| error(e.to_string()))?;
            // `Val` prints as JSON; reading it back gives a serde_json value.
            let text = val.to_string();
            outputs.push(
                serde_json::from_str(&text)
                    .map_err(|e| error(format!("output {text:?} is not JSON: {e}")))?,
            );
        }
        Ok(match outputs.len() {
            0 => Value::Null,
            1 => outputs.pop().unwrap_or(Value::Null),
            _ => Value::Array(outputs),
        })
    }
}

/// Compiled programs shared by source text. A compiled program holds jaq's whole standard
/// library (about 120 KB, 0.5 ms to compile), so the bindings of one hook installed in many
/// packages share one program instead of each compiling its own.
#[derive(Default)]
pub struct JqCache {
    /// Source → program; entries whose program every holder dropped are pruned on the next
    /// compile, so the map stays as small as the set of programs in use.
    programs: Mutex<HashMap<String, Weak<JqProgram>>>,
}

impl JqCache {
    /// The program compiled from `source`: the one already in use, or a new one.
    pub fn compile(&self, source: &str) -> Result<Arc<JqProgram>, JqError> {
        let mut programs = self.programs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(program) = programs.get(source).and_then(Weak::upgrade) {
            return Ok(program);
        }
        let program = Arc::new(JqProgram::compile(source)?);
        programs.retain(|_, p| p.strong_count() > 0);
        programs.insert(source.to_owned(), Arc::downgrade(&program));
        Ok(program)
    }
}

/// A JSON value converted to jaq's representation, so several programs can run on it without
/// converting it again. (Cloning it is cheap: jaq shares arrays and objects by reference count.)
pub struct JqInput(Result<Val, String>);

impl JqInput {
    pub fn new(input: &Value) -> JqInput {
        // Deserializing from `&Value` reads it in place: no deep copy of the object first.
        JqInput(Val::deserialize(input).map_err(|e| e.to_string()))
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
        let obj = JqProgram::compile("{name: .metadata.name, data: (.data | keys)}").unwrap();
        assert_eq!(
            obj.run(&json!({"metadata": {"name": "a"}, "data": {"y": 1, "x": 2}}))
                .unwrap(),
            json!({"name": "a", "data": ["x", "y"]})
        );
    }

    #[test]
    fn errors_name_the_program() {
        let e = JqProgram::compile(".[").unwrap_err().to_string();
        assert!(e.contains("\".[\""), "{e}");
        let p = JqProgram::compile(".a + 1").unwrap();
        let e = p.run(&json!({"a": "x"})).unwrap_err().to_string();
        assert!(e.contains(".a + 1"), "{e}");
    }

    #[test]
    fn the_cache_shares_programs_while_they_are_in_use() {
        let cache = JqCache::default();
        let a = cache.compile(".metadata.name").unwrap();
        let b = cache.compile(".metadata.name").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one program per source");
        let other = cache.compile(".data").unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        drop((a, b));
        cache.compile(".kind").unwrap();
        let live: Vec<String> = cache.programs.lock().unwrap().keys().cloned().collect();
        assert!(
            !live.contains(&".metadata.name".to_owned()),
            "dropped programs are pruned: {live:?}"
        );
        let e = cache.compile(".[").unwrap_err().to_string();
        assert!(e.contains("\".[\""), "errors name the program: {e}");
    }

    #[test]
    fn programs_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<JqProgram>();
    }
}
