//! Parses every template of a chart tree into one template set and executes the non-partial
//! ones, the way Helm's engine does, on berth's own executor (`render::exec`).

use super::context::{self, Capabilities};
use super::exec::{Dict, Exec, Kind, Source, V, value as xvalue};
use super::funcs::{self, fail};
use super::gotpl::{self, ast::DefineNode, ast::ListNode};
use super::meter;
use super::value::strval;
use super::values::Scope;
use super::{Lookup, RenderError};
use crate::ReleaseInfo;
use gotmpl::{FuncMap, Result as TplResult, TemplateError, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One executed template file.
#[derive(Debug, Clone)]
pub struct RenderedFile {
    /// Full template name, e.g. `hello/templates/deployment.yaml`.
    pub name: String,
    pub text: String,
}

struct Entry<'a> {
    name: String,
    base_path: String,
    source: &'a str,
    scope: &'a Scope<'a>,
    executable: bool,
}

/// Renders every template of the chart tree `root` (charts with their coalesced values),
/// sorted by name.
pub fn render_files(
    root: &Scope<'_>,
    release: &ReleaseInfo,
    caps: &Capabilities,
    lookup: Option<Arc<dyn Lookup>>,
) -> Result<Vec<RenderedFile>, RenderError> {
    let mut out = Vec::new();
    render_each(root, release, caps, lookup, |f| out.push(f))?;
    // Helm orders rendered files by full path before sorting objects by kind.
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Renders every template of the chart tree `root`, handing each file to `each` as soon as
/// it is rendered (in Helm's execution order).
///
/// The templates run on `render::exec` with one set of values per render: each chart's
/// `.Values` is a map shared by reference (a subchart's is its parent's `.Values.<name>`),
/// and each chart's root data (`.`/`$` of its templates) is one map too, so a change a template
/// makes (`set`, `merge`, `set $ "Values" ...`) is seen by the templates rendered after it.
pub fn render_each(
    root: &Scope<'_>,
    release: &ReleaseInfo,
    caps: &Capabilities,
    lookup: Option<Arc<dyn Lookup>>,
    mut each: impl FnMut(RenderedFile),
) -> Result<(), RenderError> {
    // Declared first, so it closes last: frees maps that hold themselves.
    let _cells = xvalue::CellScope::open();
    let mut scopes = Vec::new();
    collect_scopes(root, Vec::new(), &mut scopes);

    let mut entries = Vec::new();
    collect(root, &format!("{}/", root.name), true, &mut entries);
    // Helm parses and executes deeper paths first and, within a depth, in reverse name
    // order. A later `define` of the same name wins, so the parent chart's definitions
    // override subcharts'; and changes templates make to `.Values` are seen in this order.
    entries.sort_by(|a, b| {
        let (da, db) = (a.name.matches('/').count(), b.name.matches('/').count());
        db.cmp(&da).then_with(|| b.name.cmp(&a.name))
    });

    let funcs = function_map(lookup);
    let parsed = parse_all(&entries, &funcs);
    let mut exec = Exec::new(funcs);
    for (e, parsed) in entries.iter().zip(parsed) {
        let (tree, defines, text) = parsed?;
        let source = Source {
            file: e.name.as_str().into(),
            text,
        };
        exec.add(&e.name, tree, Some(source.clone()));
        for d in defines {
            exec.add(&d.name, d.body, Some(source.clone()));
        }
    }

    // The values, as cells: each chart scope's `.Values` is the map at its path in the top
    // chart's values.
    let top_values = xvalue::from_json(&root.values);
    let values: Vec<V> = scopes
        .iter()
        .map(|(scope, path)| values_at(&exec, &top_values, path, scope))
        .collect();
    let release_v = exec.conv.to_v(&context::release(release));
    let caps_v = exec.conv.to_v(&context::capabilities(caps));
    if let V::Map(c) = &caps_v {
        // Helm's structs, printed as Go prints them.
        for (key, fields) in context::CAPABILITY_STRUCTS {
            if let Some(V::Map(m)) = c.get(key) {
                // KubeVersion's pointer has a `String` method (its `Version`).
                let kind = if key == "KubeVersion" {
                    Kind::Stringer(fields)
                } else {
                    Kind::Struct(fields)
                };
                let s = Dict::with_kind(m.entries().into_iter().collect(), kind);
                c.update(&exec.conv.generation, |c| c.insert(key.into(), V::Map(s)));
            }
        }
    }
    // `.Capabilities` itself is a pointer to Helm's struct.
    let caps_v = match caps_v {
        V::Map(c) => V::Map(Dict::with_kind(
            c.entries().into_iter().collect(),
            Kind::Pointer(context::CAPABILITIES_FIELDS),
        )),
        other => other,
    };
    let scope_index = |s: &Scope<'_>| scopes.iter().position(|(c, _)| std::ptr::eq(*c, s));
    // Each chart's root data, built once: subcharts first, for `.Subcharts`.
    let mut roots: Vec<Option<Dict>> = vec![None; scopes.len()];
    for i in (0..scopes.len()).rev() {
        let s = scopes[i].0;
        let mut subs = BTreeMap::new();
        for sub in &s.subcharts {
            if let Some(Some(d)) = scope_index(sub).map(|j| roots[j].clone()) {
                subs.insert(Arc::<str>::from(sub.name.as_str()), V::Map(d));
            }
        }
        let files = match exec.conv.to_v(&context::files(s.chart)) {
            V::Map(m) => Dict::with_kind(m.entries().into_iter().collect(), Kind::Files),
            _ => Dict::with_kind(BTreeMap::new(), Kind::Files),
        };
        let data: BTreeMap<Arc<str>, V> = [
            // Helm's `Values` type: the same map, with its methods (`AsMap`, `Table`, ...).
            (
                "Values",
                match &values[i] {
                    V::Map(d) => V::Map(d.viewed_as(Kind::Values)),
                    other => other.clone(),
                },
            ),
            ("Release", release_v.clone()),
            ("Chart", chart_data(&exec, s, i == 0)),
            ("Capabilities", caps_v.clone()),
            ("Files", V::Map(files)),
            ("Subcharts", V::Map(Dict::new(subs))),
        ]
        .into_iter()
        .map(|(k, v)| (Arc::<str>::from(k), v))
        .collect();
        roots[i] = Some(Dict::new(data));
    }

    for e in entries.iter().filter(|e| e.executable) {
        let scope = scope_index(e.scope).unwrap_or(0);
        let Some(data) = roots.get(scope).cloned().flatten() else {
            continue;
        };
        let template: BTreeMap<Arc<str>, V> = [
            (Arc::<str>::from("Name"), V::str(e.name.as_str())),
            (Arc::<str>::from("BasePath"), V::str(e.base_path.as_str())),
        ]
        .into_iter()
        .collect();
        data.update(&exec.conv.generation, |m| {
            // Helm's `.Template` is a `Values` (`typeOf` says `common.Values`).
            m.insert(
                "Template".into(),
                V::Map(Dict::with_kind(template, Kind::Values)),
            )
        });
        let text = exec
            .execute(&e.name, &V::Map(data))
            .map_err(|text| match exec.limit_hit() {
                Some(message) => RenderError::Limit {
                    template: e.name.clone(),
                    message,
                },
                None => RenderError::Execute {
                    template: e.name.clone(),
                    message: helm_message(&text),
                },
            })?;
        // The text is kept until the render ends: it counts against the memory budget.
        if !meter::charge(text.len(), meter::Built::Output)
            && let Some(err) = meter::over()
        {
            return Err(RenderError::Limit {
                template: e.name.clone(),
                message: format!("{err} in template {}", e.name),
            });
        }
        each(RenderedFile {
            name: e.name.clone(),
            text: if text.contains("<no value>") {
                text.replace("<no value>", "")
            } else {
                text
            },
        });
    }
    if is_large(root) {
        // A large template set takes a while to free, and a process about to exit (`berth
        // render`) need not wait for that: free the trees on a thread of their own.
        let trees = exec.into_templates();
        if let Err(e) = std::thread::Builder::new().spawn(move || drop(trees)) {
            tracing::debug!("freeing the template set inline: {e}");
        }
    }
    Ok(())
}

/// Helm's text for an execution error: a `fail` or `required` anywhere inside reads
/// `execution error at (FILE:LINE:COL): MESSAGE`, placed where the outermost template called
/// into it; an error a function returned keeps Go's one-line `template: FILE:LINE:COL:
/// executing ...` text; one the executor raised itself (a nil pointer, a wrong argument, a
/// missing template), reached through any number of `include`s, is laid out as helm v4 lays
/// it out: each place on a line of its own, then `executing "NAME" at <NODE>:`, then the
/// message.
fn helm_message(text: &str) -> String {
    let marker = ["error calling fail: ", "error calling required: "]
        .iter()
        .filter_map(|m| text.rfind(m).map(|i| i + m.len()))
        .max();
    let location = text
        .strip_prefix("template: ")
        .and_then(|rest| rest.split(": executing ").next());
    if let (Some(at), Some(loc)) = (marker, location) {
        return format!("execution error at ({loc}): {}", &text[at..]);
    }
    let from_a_function = text.match_indices("error calling ").any(|(i, m)| {
        let name = text[i + m.len()..].split(':').next().unwrap_or("");
        name != "include"
    });
    if from_a_function {
        return text.to_string();
    }
    laid_out(text)
}

/// `template: LOC: executing "NAME" at <NODE>: MESSAGE` as helm v4 prints it, nested
/// through `error calling include: `.
fn laid_out(text: &str) -> String {
    let parts = text.strip_prefix("template: ").and_then(|rest| {
        let (loc, rest) = rest.split_once(": executing ")?;
        let (name, rest) = rest.split_once(" at <")?;
        let (node, message) = rest.split_once(">: ")?;
        Some((loc, name, node, message))
    });
    let Some((loc, name, node, message)) = parts else {
        return text.to_string();
    };
    let message = match message.strip_prefix("error calling include: ") {
        Some(inner) => format!("error calling include:\n{}", laid_out(inner)),
        None => message.to_string(),
    };
    format!("{loc}\n  executing {name} at <{node}>:\n    {message}")
}

/// `.Values` of the chart scope at `path` in the top chart's values; when that is missing,
/// the scope's own coalesced values, put there when the parent map exists.
fn values_at(exec: &Exec, top: &V, path: &[String], scope: &Scope<'_>) -> V {
    let Some((last, init)) = path.split_last() else {
        return top.clone();
    };
    let mut cur = top.clone();
    for seg in init {
        cur = match &cur {
            V::Map(d) => d.get(seg).unwrap_or(V::Nil),
            _ => V::Nil,
        };
    }
    let V::Map(parent) = cur else {
        return xvalue::from_json(&scope.values);
    };
    match parent.get(last) {
        Some(v @ V::Map(_)) => v,
        _ => {
            let own = xvalue::from_json(&scope.values);
            parent.update(&exec.conv.generation, |m| {
                m.insert(last.as_str().into(), own.clone())
            });
            own
        }
    }
}

/// `.Chart` for chart scope `s`; without annotations in `Chart.yaml` its `Annotations` is Go's
/// nil map (`toJson` gives `null`, as in helm).
fn chart_data(exec: &Exec, s: &Scope<'_>, is_root: bool) -> V {
    let chart = exec.conv.to_v(&context::chart_in_scope(s, is_root));
    let unset = s
        .chart
        .metadata
        .get("annotations")
        .is_none_or(|a| a.is_null());
    if let (V::Map(c), true) = (&chart, unset) {
        let nil = V::Map(Dict::with_kind(BTreeMap::new(), Kind::NilMap));
        c.update(&exec.conv.generation, |c| {
            c.insert("Annotations".into(), nil)
        });
    } else if let V::Map(c) = &chart
        && let Some(V::Map(a)) = c.get("Annotations")
    {
        // Chart annotations are a `map[string]string`.
        let typed = V::Map(a.viewed_as(Kind::StrMap));
        c.update(&exec.conv.generation, |c| {
            c.insert("Annotations".into(), typed)
        });
    }
    chart
}

/// Whether the templates of `root` are enough work to be worth a second thread.
pub fn is_large(root: &Scope<'_>) -> bool {
    fn bytes(s: &Scope<'_>) -> usize {
        s.chart.templates.values().map(String::len).sum::<usize>()
            + s.subcharts.iter().map(bytes).sum::<usize>()
    }
    bytes(root) >= PARALLEL_PARSE_BYTES
}

/// A template's tree, its definitions and the text they were parsed from.
type Parsed = Result<(ListNode, Vec<DefineNode>, Arc<str>), RenderError>;

/// Parses every template; on a large chart the work is split across two threads (templates
/// are independent until they are added to the set, which happens in order afterwards).
fn parse_all(entries: &[Entry<'_>], funcs: &FuncMap) -> Vec<Parsed> {
    let is_function = |name: &str| super::exec::is_function(funcs, name);
    let parse = |e: &Entry<'_>| -> Parsed {
        let tree =
            gotpl::parse(&e.name, e.source, &is_function).map_err(|err| RenderError::Parse {
                template: e.name.clone(),
                message: err.helm_message(),
            })?;
        Ok((tree.root, tree.defines, Arc::from(e.source)))
    };
    let total: usize = entries.iter().map(|e| e.source.len()).sum();
    if total < PARALLEL_PARSE_BYTES {
        return entries.iter().map(parse).collect();
    }
    // Split at half the bytes, not half the files, so both threads get similar work.
    let mut acc = 0;
    let mid = entries
        .iter()
        .position(|e| {
            acc += e.source.len();
            acc * 2 >= total
        })
        .map_or(entries.len(), |i| i + 1);
    let (first, second) = entries.split_at(mid);
    std::thread::scope(|s| {
        let other = s.spawn(|| second.iter().map(parse).collect::<Vec<_>>());
        let mut out: Vec<Parsed> = first.iter().map(parse).collect();
        match other.join() {
            Ok(rest) => out.extend(rest),
            // The parser does not panic on bad input; if it ever did, parse here instead.
            Err(_) => out.extend(second.iter().map(parse)),
        }
        out
    })
}

/// Below this much template text, a second parsing thread costs more than it saves.
const PARALLEL_PARSE_BYTES: usize = 64 * 1024;

/// Each chart scope of the tree with the path of its values in the top chart's values.
fn collect_scopes<'s, 'a>(
    scope: &'s Scope<'a>,
    path: Vec<String>,
    out: &mut Vec<(&'s Scope<'a>, Vec<String>)>,
) {
    out.push((scope, path.clone()));
    for sub in &scope.subcharts {
        let mut p = path.clone();
        p.push(sub.name.clone());
        collect_scopes(sub, p, out);
    }
}

/// Lists the chart tree's templates. Partials (`_*`) only provide definitions; `NOTES.txt` is
/// rendered for the top chart only (Helm's default), and kept apart from the manifests.
fn collect<'a>(scope: &'a Scope<'a>, prefix: &str, top: bool, out: &mut Vec<Entry<'a>>) {
    for (path, source) in &scope.chart.templates {
        let base = path.rsplit('/').next().unwrap_or(path);
        let notes = base == "NOTES.txt";
        out.push(Entry {
            name: format!("{prefix}{path}"),
            base_path: format!("{prefix}templates"),
            source,
            scope,
            executable: !base.starts_with('_') && (!notes || top),
        });
    }
    for sub in &scope.subcharts {
        collect(sub, &format!("{prefix}charts/{}/", sub.name), false, out);
    }
}

/// Sprig plus `lookup` and the `.Files`/`.Capabilities` methods (`render::exec` runs
/// `include`, `tpl` and the functions that change maps itself).
fn function_map(lookup: Option<Arc<dyn Lookup>>) -> FuncMap {
    let mut fm = funcs::sprig();
    fm.insert(
        "lookup".into(),
        Arc::new(move |args: &[Value]| lookup_fn(lookup.as_deref(), args)),
    );
    super::files::register(&mut fm);
    fm
}

/// Helm's `lookup apiVersion kind namespace name`: the object, the list (`items`) when `name`
/// is empty, or an empty map when it does not exist or no cluster is attached.
fn lookup_fn(lookup: Option<&dyn Lookup>, args: &[Value]) -> TplResult<Value> {
    if args.len() != 4 {
        return Err(TemplateError::ArgCount {
            name: "lookup".into(),
            expected: 4,
            got: args.len(),
        });
    }
    let Some(lookup) = lookup else {
        return Ok(Value::Map(Arc::default()));
    };
    let [api_version, kind, namespace, name] = [0, 1, 2, 3].map(|i| strval(&args[i]));
    let found = lookup
        .lookup(&api_version, &kind, &namespace, &name)
        .map_err(|e| fail("lookup", e))?;
    Ok(match found {
        Some(v) => super::value::from_json(&v),
        None => Value::Map(Arc::default()),
    })
}
