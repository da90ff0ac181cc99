//! The machinery of the differential test: sending one request to both clusters, normalizing
//! what must differ, diffing, and matching differences against the allow-list.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;
use std::time::Duration;

use berth_devcluster::test_namespace::TestNamespace;
use http::{Method, Request};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use regex::Regex;
use serde_json::{Map, Value, json};

use super::known::{KNOWN, Known, When};

/// Bound on one answer, and on the events of one watch.
const ANSWER_DEADLINE: Duration = Duration::from_secs(20);
/// Bound on a condition ([`Harness::wait`]) to become true, e.g. garbage collection or a
/// namespace's termination, which take a few seconds on a real cluster.
const CONDITION_DEADLINE: Duration = Duration::from_secs(90);

/// How an answer is looked at before comparing.
#[derive(Clone, Copy)]
pub enum View {
    /// Everything.
    Full,
    /// Everything, with the arrays at these pointers (into the answer, e.g. `/body/items`)
    /// turned into maps by their items' `name` (or `metadata.name`, or `groupVersion`):
    /// discovery lists whose order carries no meaning.
    Keyed(&'static [&'static str]),
    /// A projection, for documents only part of which the dev cluster is meant to serve
    /// (OpenAPI); the function says which part.
    Project(fn(&Value) -> Value),
}

/// One request, with `{{ns}}`, `{{sfx}}` and saved variables (`{{name}}`) in its path and
/// body expanded per cluster.
#[derive(Clone)]
pub struct Req {
    pub kind: String,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    accept: Option<&'static str>,
    body: Option<String>,
    saves: Vec<(String, String)>,
    view: View,
    /// The identity sending it (see [`Side::add_identity`]); None: the admin client.
    by: Option<String>,
    /// Extra headers (`{{var}}` expanded), e.g. `Impersonate-User`.
    headers: Vec<(String, String)>,
}

pub const MERGE: &str = "application/merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";

impl Req {
    fn new(kind: &str, method: Method, path: &str) -> Req {
        Req {
            kind: kind.to_string(),
            method,
            path: path.to_string(),
            content_type: None,
            accept: None,
            body: None,
            saves: Vec::new(),
            view: View::Full,
            by: None,
            headers: Vec::new(),
        }
    }

    pub fn new_method(kind: &str, method: Method, path: &str) -> Req {
        Req::new(kind, method, path)
    }

    /// Sent by `identity` (a client [`Side::add_identity`] registered on both sides).
    pub fn by(mut self, identity: &str) -> Req {
        self.by = Some(identity.to_string());
        self
    }

    /// An extra header.
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn get(kind: &str, path: &str) -> Req {
        Req::new(kind, Method::GET, path)
    }

    pub fn post(kind: &str, path: &str, body: Value) -> Req {
        Req::new(kind, Method::POST, path).json(body)
    }

    pub fn put(kind: &str, path: &str, body: Value) -> Req {
        Req::new(kind, Method::PUT, path).json(body)
    }

    pub fn patch(kind: &str, path: &str, content_type: &'static str, body: Value) -> Req {
        let mut r = Req::new(kind, Method::PATCH, path).json(body);
        r.content_type = Some(content_type);
        r
    }

    pub fn delete(kind: &str, path: &str) -> Req {
        Req::new(kind, Method::DELETE, path)
    }

    /// A JSON body.
    pub fn json(mut self, body: Value) -> Req {
        self.body = Some(body.to_string());
        self.content_type.get_or_insert("application/json");
        self
    }

    /// A body sent as it is, e.g. malformed JSON.
    pub fn raw(mut self, content_type: &'static str, body: &str) -> Req {
        self.body = Some(body.to_string());
        self.content_type = Some(content_type);
        self
    }

    pub fn accept(mut self, accept: &'static str) -> Req {
        self.accept = Some(accept);
        self
    }

    /// Saves the string (or JSON text) at `pointer` of each cluster's own answer body as
    /// `{{var}}` for later requests.
    pub fn save(mut self, var: &str, pointer: &str) -> Req {
        self.saves.push((var.to_string(), pointer.to_string()));
        self
    }

    pub fn view(mut self, view: View) -> Req {
        self.view = view;
        self
    }
}

/// One cluster, with its own test namespace and saved variables.
pub struct Side {
    label: &'static str,
    client: Client,
    /// Clients of other identities, by name.
    identities: HashMap<String, Client>,
    ns: TestNamespace,
    suffix: String,
    vars: HashMap<String, String>,
    /// Names the server generated (generateName), replaced by `<generated>` when comparing.
    generated: BTreeSet<String>,
}

impl Side {
    pub async fn new(label: &'static str, client: Client, suffix: &str) -> Side {
        let ns = TestNamespace::create(&client, "diff")
            .await
            .unwrap_or_else(|e| panic!("{label}: test namespace: {e}"));
        Side {
            label,
            client,
            identities: HashMap::new(),
            ns,
            suffix: suffix.to_string(),
            vars: HashMap::new(),
            generated: BTreeSet::new(),
        }
    }

    /// Registers a client for requests sent `by(name)`.
    pub fn add_identity(&mut self, name: &str, client: Client) {
        self.identities.insert(name.to_string(), client);
    }

    /// A variable saved from an earlier answer.
    pub fn var(&self, name: &str) -> String {
        self.vars
            .get(name)
            .unwrap_or_else(|| panic!("{}: no saved variable {name}", self.label))
            .clone()
    }

    /// Replaces what must differ between clusters in `v` (see [`normalize`]).
    pub fn normalize(&self, v: Value) -> Value {
        normalize(self, v)
    }

    pub fn expand(&self, text: &str) -> String {
        let mut out = text
            .replace("{{ns}}", &self.ns)
            .replace("{{sfx}}", &self.suffix);
        for (k, v) in &self.vars {
            out = out.replace(&format!("{{{{{k}}}}}"), v);
        }
        assert!(
            !out.contains("{{"),
            "{}: unexpanded variable in {out}",
            self.label
        );
        out
    }

    fn request(&self, req: &Req) -> Request<Body> {
        let mut b = Request::builder()
            .method(req.method.clone())
            .uri(self.expand(&req.path));
        if let Some(ct) = req.content_type {
            b = b.header(http::header::CONTENT_TYPE, ct);
        }
        b = b.header(
            http::header::ACCEPT,
            req.accept.unwrap_or("application/json"),
        );
        for (name, value) in &req.headers {
            b = b.header(name.as_str(), self.expand(value));
        }
        let body = req
            .body
            .as_deref()
            .map(|t| self.expand(t).into_bytes())
            .unwrap_or_default();
        b.body(Body::from(body)).expect("request builds")
    }

    /// Sends a request; the answer is `{code, body, warnings}` with the body parsed as JSON
    /// (or kept as text when it is not JSON).
    async fn send(&mut self, req: &Req) -> Value {
        let label = self.label;
        let answer = tokio::time::timeout(ANSWER_DEADLINE, async {
            let client = match &req.by {
                Some(who) => self
                    .identities
                    .get(who)
                    .unwrap_or_else(|| panic!("{label}: no identity {who}")),
                None => &self.client,
            };
            let res = client
                .send(self.request(req))
                .await
                .unwrap_or_else(|e| panic!("{label}: {} {}: {e}", req.method, req.path));
            let code = res.status().as_u16();
            let warnings: Vec<Value> = res
                .headers()
                .get_all("warning")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(|v| Value::String(v.to_string()))
                .collect();
            let bytes = res
                .into_body()
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{label}: reading the answer to {}: {e}", req.path))
                .to_bytes();
            let body = serde_json::from_slice::<Value>(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            let mut answer = json!({ "code": code, "body": body });
            if !warnings.is_empty() {
                answer["warnings"] = Value::Array(warnings);
            }
            answer
        })
        .await
        .unwrap_or_else(|_| panic!("{label}: no answer to {} {} in time", req.method, req.path));
        for (var, pointer) in &req.saves {
            let v = answer["body"].pointer(pointer).unwrap_or_else(|| {
                panic!(
                    "{label}: [{}] the answer has nothing at {pointer} to save as {var}: {answer}",
                    req.kind
                )
            });
            let text = v
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| v.to_string());
            self.vars.insert(var.clone(), text);
        }
        self.remember_generated(&answer["body"]);
        answer
    }

    fn remember_generated(&mut self, v: &Value) {
        match v {
            Value::Object(m) => {
                if let (Some(Value::String(prefix)), Some(Value::String(name))) =
                    (m.get("generateName"), m.get("name"))
                    && name.starts_with(prefix.as_str())
                    && name != prefix
                {
                    self.generated.insert(name.clone());
                }
                m.values().for_each(|c| self.remember_generated(c));
            }
            Value::Array(a) => a.iter().for_each(|c| self.remember_generated(c)),
            _ => {}
        }
    }

    /// Opens a watch and returns its first `count` events (fewer when the deadline passes,
    /// which then shows as a difference), after `during` ran on this side.
    async fn open_watch(&mut self, req: &Req) -> WatchStream {
        let res = tokio::time::timeout(ANSWER_DEADLINE, self.client.send(self.request(req)))
            .await
            .unwrap_or_else(|_| panic!("{}: watch {} not answered in time", self.label, req.path))
            .unwrap_or_else(|e| panic!("{}: watch {}: {e}", self.label, req.path));
        WatchStream {
            code: res.status().as_u16(),
            body: res.into_body(),
            buffer: Vec::new(),
        }
    }
}

pub struct WatchStream {
    code: u16,
    body: Body,
    buffer: Vec<u8>,
}

impl WatchStream {
    async fn events(&mut self, count: usize) -> Value {
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
        while events.len() < count {
            while let Some(nl) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=nl).collect();
                if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                    events.push(v);
                }
            }
            if events.len() >= count {
                break;
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                // The stream ended, failed, or the deadline passed: what arrived is the answer.
                _ => break,
            }
        }
        json!({ "code": self.code, "events": events })
    }
}

/// One difference between the two answers.
struct Diff {
    path: String,
    dev: Option<Value>,
    real: Option<Value>,
}

pub struct Report {
    pub kinds: usize,
    pub failures: Vec<String>,
    pub summary: String,
}

pub struct Harness {
    dev: Side,
    real: Side,
    /// The differences this run accepts.
    known: &'static [Known],
    kinds: BTreeSet<String>,
    requests: usize,
    failures: Vec<String>,
    used_known: BTreeSet<&'static str>,
    allowed: usize,
}

impl Harness {
    pub fn new(dev: Side, real: Side) -> Harness {
        Harness::with_known(dev, real, KNOWN)
    }

    /// A harness accepting only the differences of `known`.
    pub fn with_known(dev: Side, real: Side, known: &'static [Known]) -> Harness {
        Harness {
            dev,
            real,
            known,
            kinds: BTreeSet::new(),
            requests: 0,
            failures: Vec::new(),
            used_known: BTreeSet::new(),
            allowed: 0,
        }
    }

    /// Sends `req` to both clusters and compares the answers; returns them, normalized
    /// (dev, real).
    pub async fn run(&mut self, req: Req) -> (Value, Value) {
        let dev = self.dev.send(&req).await;
        let real = self.real.send(&req).await;
        self.compare(&req, dev, real)
    }

    /// Sends `req` to each cluster until `ready` holds for its answer (bounded), then
    /// compares the last answers.
    pub async fn wait(&mut self, req: Req, what: &str, ready: fn(&Value) -> bool) {
        let mut last = Vec::new();
        let mut failures = Vec::new();
        for side in [&mut self.dev, &mut self.real] {
            let deadline = tokio::time::Instant::now() + CONDITION_DEADLINE;
            let answer = loop {
                let a = side.send(&req).await;
                if ready(&a) {
                    break a;
                }
                if tokio::time::Instant::now() > deadline {
                    failures.push(format!(
                        "[{}] {}: {what} did not happen within {CONDITION_DEADLINE:?}; last answer: {}",
                        req.kind,
                        side.label,
                        short(&a)
                    ));
                    break a;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            last.push(answer);
        }
        self.failures.extend(failures);
        let real = last.pop().expect("real");
        let dev = last.pop().expect("dev");
        self.compare(&req, dev, real);
    }

    /// Opens `watch` on both clusters, runs `during` (each compared as usual), then compares
    /// the first `count` events of each watch.
    pub async fn watch(&mut self, watch: Req, during: Vec<Req>, count: usize) {
        let mut dev_stream = self.dev.open_watch(&watch).await;
        let mut real_stream = self.real.open_watch(&watch).await;
        for r in during {
            self.run(r).await;
        }
        let dev = dev_stream.events(count).await;
        let real = real_stream.events(count).await;
        drop((dev_stream, real_stream));
        self.compare(&watch, dev, real);
    }

    pub fn dev(&mut self) -> &mut Side {
        &mut self.dev
    }

    pub fn real(&mut self) -> &mut Side {
        &mut self.real
    }

    /// Compares two answers obtained outside [`Harness::run`] (e.g. a CLI's output), each
    /// normalized by its side, as answers to a request of `kind`.
    pub fn check(&mut self, kind: &str, dev: Value, real: Value) {
        let req = Req::new(kind, Method::GET, "(not a request)");
        self.compare(&req, dev, real);
    }

    fn compare(&mut self, req: &Req, dev: Value, real: Value) -> (Value, Value) {
        self.requests += 1;
        self.kinds.insert(req.kind.clone());
        let dev = view(req.view, normalize(&self.dev, dev));
        let real = view(req.view, normalize(&self.real, real));
        let mut diffs = Vec::new();
        diff_values(&mut String::new(), Some(&dev), Some(&real), &mut diffs);
        let mut unexplained = Vec::new();
        for d in diffs {
            match self.known.iter().find(|k| explains(k, &req.kind, &d)) {
                Some(k) => {
                    self.used_known.insert(k.id);
                    self.allowed += 1;
                }
                None => unexplained.push(d),
            }
        }
        if !unexplained.is_empty() {
            let mut text = format!(
                "[{}] {} {}{}",
                req.kind,
                req.method,
                req.path,
                req.body
                    .as_deref()
                    .map(|b| format!("\n    body: {}", truncate(b, 400)))
                    .unwrap_or_default()
            );
            for d in unexplained {
                text.push_str(&format!(
                    "\n    at {}:\n      dev:  {}\n      real: {}",
                    if d.path.is_empty() { "/" } else { &d.path },
                    d.dev
                        .as_ref()
                        .map(short)
                        .unwrap_or_else(|| "(absent)".into()),
                    d.real
                        .as_ref()
                        .map(short)
                        .unwrap_or_else(|| "(absent)".into()),
                ));
            }
            self.failures.push(text);
        }
        (dev, real)
    }

    /// Ends the run: the report, with an allow-list entry that explained nothing as a failure
    /// too (the difference is gone: take it off the list and the crate docs).
    pub fn finish(mut self) -> Report {
        for k in self.known {
            if !self.used_known.contains(k.id) && !super::known::INTERMITTENT.contains(&k.id) {
                self.failures.push(format!(
                    "allow-list entry `{}` explained no difference: remove it from known.rs and from the \"Known differences\" section of src/lib.rs",
                    k.id
                ));
            }
        }
        let summary = format!(
            "differential conformance: {} requests of {} kinds; {} differences explained by {} allow-list entries; {} unexplained",
            self.requests,
            self.kinds.len(),
            self.allowed,
            self.used_known.len(),
            self.failures.len()
        );
        Report {
            kinds: self.kinds.len(),
            failures: self.failures,
            summary,
        }
    }
}

fn explains(k: &Known, kind: &str, d: &Diff) -> bool {
    let kind_ok = k.kinds.iter().any(|pat| match pat.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => kind == *pat,
    });
    // A pattern matches the difference's path or a prefix of it, segment by segment; a `*`
    // segment matches any one segment.
    let path_ok = k.paths.iter().any(|p| {
        let pattern: Vec<&str> = p.split('/').collect();
        let path: Vec<&str> = d.path.split('/').collect();
        *p == d.path
            || (!p.is_empty()
                && pattern.len() <= path.len()
                && pattern.iter().zip(&path).all(|(a, b)| a == b || *a == "*"))
            || p.is_empty()
    });
    let when_ok = match k.when {
        When::Any => true,
        When::DevAbsent => d.dev.is_none(),
        When::RealAbsent => d.real.is_none(),
    };
    kind_ok && path_ok && when_ok
}

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").expect("regex")
});
static TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$").expect("regex")
});

/// Replaces what must differ between two clusters by placeholders.
fn normalize(side: &Side, v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let k2 = normalize_str(side, &k);
                let v = match (k.as_str(), &v) {
                    ("uid", Value::String(_)) => json!("<uid>"),
                    ("resourceVersion", Value::String(s)) if !s.is_empty() => json!("<rv>"),
                    ("continue", Value::String(s)) if !s.is_empty() => json!("<continue>"),
                    ("ca.crt", Value::String(_)) => json!("<cluster CA>"),
                    ("serverAddress", Value::String(_)) => json!("<address>"),
                    // kube-apiserver orders entries by operation, then time in whole
                    // seconds, then manager: whether a second ticked between two
                    // managers' writes differs from run to run and cluster to cluster,
                    // and times are placeholders here, so entries compare in the order
                    // the apiserver uses within one second.
                    ("managedFields", Value::Array(items)) => {
                        let mut items: Vec<Value> =
                            items.iter().map(|c| normalize(side, c.clone())).collect();
                        items.sort_by_key(|e| {
                            ["operation", "manager", "apiVersion", "subresource"]
                                .map(|k| e.get(k).and_then(Value::as_str).unwrap_or("").to_string())
                        });
                        Value::Array(items)
                    }
                    ("causes", Value::Array(items)) => {
                        let mut items: Vec<Value> =
                            items.iter().map(|c| normalize(side, c.clone())).collect();
                        items.sort_by_key(|c| c.to_string());
                        Value::Array(items)
                    }
                    _ => normalize(side, v),
                };
                out.insert(k2, v);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(|c| normalize(side, c)).collect()),
        Value::String(s) => Value::String(normalize_str(side, &s)),
        other => other,
    }
}

fn normalize_str(side: &Side, s: &str) -> String {
    if TIME.is_match(s) {
        return "<time>".into();
    }
    let mut out = s.to_string();
    for g in side.generated.iter().rev() {
        out = out.replace(g.as_str(), "<generated>");
    }
    out = out
        .replace(&*side.ns, "{{ns}}")
        .replace(&side.suffix, "{{sfx}}");
    UUID.replace_all(&out, "<uuid>").into_owned()
}

fn view(view: View, v: Value) -> Value {
    match view {
        View::Full => v,
        View::Keyed(pointers) => {
            let mut v = v;
            for p in pointers {
                if let Some(target) = v.pointer_mut(p) {
                    keyed(target);
                }
            }
            v
        }
        View::Project(f) => f(&v),
    }
}

/// An array of named items as a map by name.
fn keyed(v: &mut Value) {
    let Value::Array(items) = v else {
        return;
    };
    let mut m = Map::new();
    for (i, item) in items.iter().enumerate() {
        let name = ["/name", "/metadata/name", "/groupVersion", "/version"]
            .iter()
            .find_map(|p| item.pointer(p).and_then(Value::as_str))
            .map(String::from)
            .unwrap_or_else(|| format!("#{i}"));
        m.insert(name, item.clone());
    }
    *v = Value::Object(m);
}

fn diff_values(path: &mut String, dev: Option<&Value>, real: Option<&Value>, out: &mut Vec<Diff>) {
    match (dev, real) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: Vec<&String> = a
                .keys()
                .chain(b.keys().filter(|k| !a.contains_key(*k)))
                .collect();
            for k in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                diff_values(path, a.get(k), b.get(k), out);
                path.truncate(len);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                diff_values(path, a.get(i), b.get(i), out);
                path.truncate(len);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Diff {
            path: path.clone(),
            dev: a.cloned(),
            real: b.cloned(),
        }),
    }
}

fn short(v: &Value) -> String {
    truncate(&v.to_string(), 600)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}
