//! Parses every template of a chart tree into one template set and executes the non-partial
//! ones, the way Helm's engine does. `include` and `tpl` need that set while it executes, so
//! they hold a weak handle that is filled in once parsing is done.

use super::context::{self, Capabilities, TemplateData};
use super::funcs::{self, fail, message, string};
use super::live_values::{LiveValues, Seg};
use super::methods;
use super::value::strval;
use super::values::Scope;
use super::{Lookup, RenderError};
use crate::ReleaseInfo;
use gotmpl::parse::{ListNode, Parser};
use gotmpl::{FuncMap, Result as TplResult, Template, TemplateError, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// How deep `include`/`tpl` may nest. Helm allows 1000 per template name; a lower global bound
/// keeps a runaway recursive chart from overflowing the thread's stack.
const MAX_INCLUDE_DEPTH: usize = 100;

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
pub fn render_each(
    root: &Scope<'_>,
    release: &ReleaseInfo,
    caps: &Capabilities,
    lookup: Option<Arc<dyn Lookup>>,
    mut each: impl FnMut(RenderedFile),
) -> Result<(), RenderError> {
    let mut scopes = Vec::new();
    collect_scopes(root, Vec::new(), &mut scopes);
    let live = Arc::new(LiveValues::new(
        super::value::from_json(&root.values),
        scopes.iter().map(|(_, path)| path.clone()).collect(),
        |i| super::value::from_json(&scopes[i].0.values),
    ));
    let scope_index = |s: &Scope<'_>| scopes.iter().position(|(c, _)| std::ptr::eq(*c, s));

    let mut entries = Vec::new();
    collect(root, &format!("{}/", root.name), true, &mut entries);
    // Helm parses and executes deeper paths first and, within a depth, in reverse name
    // order. A later `define` of the same name wins, so the parent chart's definitions
    // override subcharts'; and changes templates make to `.Values` are seen in this order.
    entries.sort_by(|a, b| {
        let (da, db) = (a.name.matches('/').count(), b.name.matches('/').count());
        db.cmp(&da).then_with(|| b.name.cmp(&a.name))
    });

    let set: Arc<OnceLock<Template>> = Arc::new(OnceLock::new());
    let mut template =
        Template::new("").funcs(function_map(Arc::downgrade(&set), lookup, live.clone()));
    for (e, parsed) in entries.iter().zip(parse_all(&entries)) {
        let (tree, defines) = parsed?;
        template = template.add_parse_tree(&e.name, tree);
        for d in defines {
            template = template.add_parse_tree(d.name.as_str(), d.body);
        }
    }
    let _ = set.set(template);
    let Some(template) = set.get() else {
        return Err(RenderError::Chart(
            "template set was not initialised".into(),
        ));
    };

    let release_v = context::release(release);
    let caps_v = context::capabilities(caps);
    // `.Chart` and `.Files` are the same for every template of a chart; convert them once.
    let mut per_chart: HashMap<usize, (Value, Value)> = HashMap::new();
    let mut chart_and_files = |idx: usize| {
        per_chart
            .entry(idx)
            .or_insert_with(|| {
                let s = scopes[idx].0;
                (context::chart_in_scope(s), context::files(s.chart))
            })
            .clone()
    };
    // `.Subcharts`: each enabled subchart's top-level objects, by the name it is known by.
    fn subcharts(
        scope: &Scope<'_>,
        index: &dyn Fn(&Scope<'_>) -> Option<usize>,
        chart_and_files: &mut dyn FnMut(usize) -> (Value, Value),
        live: &LiveValues,
        release: &Value,
        caps: &Value,
    ) -> Value {
        let mut out = std::collections::BTreeMap::new();
        for sub in &scope.subcharts {
            let Some(idx) = index(sub) else { continue };
            let (chart, files) = chart_and_files(idx);
            let nested = subcharts(sub, index, chart_and_files, live, release, caps);
            let data: std::collections::BTreeMap<Arc<str>, Value> = [
                ("Chart", chart),
                ("Files", files),
                ("Release", release.clone()),
                ("Capabilities", caps.clone()),
                ("Values", live.current(idx)),
                ("Subcharts", nested),
            ]
            .into_iter()
            .map(|(k, v)| (Arc::<str>::from(k), v))
            .collect();
            out.insert(
                Arc::<str>::from(sub.name.as_str()),
                Value::Map(Arc::new(data)),
            );
        }
        Value::Map(Arc::new(out))
    }
    for e in entries.iter().filter(|e| e.executable) {
        let scope = scope_index(e.scope).unwrap_or(0);
        let (chart, files) = chart_and_files(scope);
        let subs = subcharts(
            e.scope,
            &scope_index,
            &mut chart_and_files,
            &live,
            &release_v,
            &caps_v,
        );
        let data = TemplateData {
            subcharts: subs,
            values: live.current(scope),
            release: &release_v,
            capabilities: &caps_v,
            chart,
            files,
            template_name: &e.name,
            base_path: &e.base_path,
        }
        .build();
        live.register_root(&data, scope);
        let text = template
            .execute_template_to_string(&e.name, &data)
            .map_err(|err| RenderError::Execute {
                template: e.name.clone(),
                message: message(&err),
            })?;
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
        // render`) need not wait for that: free it on a thread of its own.
        if let Err(e) = std::thread::Builder::new().spawn(move || drop(set)) {
            tracing::debug!("freeing the template set inline: {e}");
        }
    }
    Ok(())
}

/// Whether the templates of `root` are enough work to be worth a second thread.
pub fn is_large(root: &Scope<'_>) -> bool {
    fn bytes(s: &Scope<'_>) -> usize {
        s.chart.templates.values().map(String::len).sum::<usize>()
            + s.subcharts.iter().map(bytes).sum::<usize>()
    }
    bytes(root) >= PARALLEL_PARSE_BYTES
}

type Parsed = Result<(ListNode, Vec<gotmpl::parse::DefineNode>), RenderError>;

/// Parses every template; on a large chart the work is split across two threads (templates
/// are independent until they are added to the set, which happens in order afterwards).
fn parse_all(entries: &[Entry<'_>]) -> Vec<Parsed> {
    let parse = |e: &Entry<'_>| -> Parsed {
        let src = methods::rewrite_methods(e.source);
        let (mut tree, mut defines) = Parser::with_name(Some(&e.name), &src, "{{", "}}")
            .and_then(Parser::parse)
            .map_err(|err| RenderError::Parse {
                template: e.name.clone(),
                message: err.to_string(),
            })?;
        methods::add_print_hook(&mut tree);
        for d in &mut defines {
            methods::add_print_hook(&mut d.body);
        }
        Ok((tree, defines))
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
    path: Vec<Seg>,
    out: &mut Vec<(&'s Scope<'a>, Vec<Seg>)>,
) {
    out.push((scope, path.clone()));
    for sub in &scope.subcharts {
        let mut p = path.clone();
        p.push(Seg::Key(sub.name.as_str().into()));
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

/// Sprig plus the functions bound to this render's template set and values.
fn function_map(
    set: Weak<OnceLock<Template>>,
    lookup: Option<Arc<dyn Lookup>>,
    live: Arc<LiveValues>,
) -> FuncMap {
    let mut fm = funcs::sprig();
    // The functions that change a dict in place in Helm; when the dict is part of `.Values`,
    // the change goes into the live values.
    for name in [
        "set",
        "unset",
        "merge",
        "mergeOverwrite",
        "mustMerge",
        "mustMergeOverwrite",
    ] {
        if let Some(f) = fm.get(name).cloned() {
            let live = live.clone();
            fm.insert(
                name.into(),
                Arc::new(move |args: &[Value]| {
                    let out = f(args)?;
                    if let Some(dict) = args.first() {
                        live.replaced(dict, &out);
                    }
                    Ok(out)
                }),
            );
        }
    }
    fm.insert(
        methods::VALUES_FN.into(),
        Arc::new(move |args: &[Value]| live.read(args.first().unwrap_or(&Value::Nil))),
    );
    let depth = Arc::new(AtomicUsize::new(0));
    let (s, d) = (set.clone(), depth.clone());
    fm.insert(
        "include".into(),
        Arc::new(move |args: &[Value]| include(&s, &d, args)),
    );
    let (s, d) = (set, depth);
    fm.insert(
        "tpl".into(),
        Arc::new(move |args: &[Value]| tpl(&s, &d, args)),
    );
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

/// Counts one level of `include`/`tpl` nesting for as long as it lives.
struct DepthGuard<'a>(&'a AtomicUsize);

impl<'a> DepthGuard<'a> {
    fn enter(name: &str, depth: &'a AtomicUsize) -> TplResult<Self> {
        if depth.fetch_add(1, Ordering::SeqCst) >= MAX_INCLUDE_DEPTH {
            depth.fetch_sub(1, Ordering::SeqCst);
            return Err(fail(
                name,
                format!("nesting deeper than {MAX_INCLUDE_DEPTH}"),
            ));
        }
        Ok(DepthGuard(depth))
    }
}

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn with_set<T>(
    set: &Weak<OnceLock<Template>>,
    f: impl FnOnce(&Template) -> TplResult<T>,
) -> TplResult<T> {
    let strong = set
        .upgrade()
        .ok_or_else(|| TemplateError::Exec("template set is gone".into()))?;
    let t = strong
        .get()
        .ok_or_else(|| TemplateError::Exec("template set is not ready".into()))?;
    f(t)
}

/// `include name data`: executes a named template and returns its output as a string.
fn include(
    set: &Weak<OnceLock<Template>>,
    depth: &AtomicUsize,
    args: &[Value],
) -> TplResult<Value> {
    let name = strval(args.first().unwrap_or(&Value::Nil));
    let data = args.get(1).cloned().unwrap_or(Value::Nil);
    let _guard = DepthGuard::enter("include", depth)?;
    with_set(set, |t| {
        t.execute_template_to_string(&name, &data)
            .map(string)
            .map_err(|e| TemplateError::Exec(format!("include {name:?}: {}", message(&e))))
    })
}

/// `tpl text data`: parses `text` as a template alongside the chart's templates and runs it.
fn tpl(set: &Weak<OnceLock<Template>>, depth: &AtomicUsize, args: &[Value]) -> TplResult<Value> {
    let text = strval(args.first().unwrap_or(&Value::Nil));
    let data = args.get(1).cloned().unwrap_or(Value::Nil);
    let _guard = DepthGuard::enter("tpl", depth)?;
    with_set(set, |t| {
        let out = t
            .clone()
            .parse(&methods::rewrite(&text))
            .and_then(|t| t.execute_to_string(&data))
            .map_err(|e| TemplateError::Exec(format!("tpl: {}", message(&e))))?;
        Ok(string(out.replace("<no value>", "")))
    })
}
