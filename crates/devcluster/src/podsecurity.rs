//! Pod Security admission, as kube-apiserver's PodSecurity plugin applies the Pod Security
//! Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
//!
//! - a namespace's labels `pod-security.kubernetes.io/<mode>: privileged|baseline|restricted`
//!   and `<mode>-version: latest|v1.<minor>` set the policy; `warn` defaults to `enforce`;
//!   labels with other values make the namespace write invalid (422);
//! - a Pod created (or updated in its spec) in a namespace whose `enforce` level it violates is
//!   refused (403 `violates PodSecurity "<level>:<version>": <check> (<detail>), ...`); one that
//!   passes `enforce` but not `warn` gets a `Warning` header (`would violate PodSecurity ...`);
//! - workload objects (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
//!   ReplicationControllers, PodTemplates) are never refused: their pod template is checked
//!   against `warn` and answered with a `Warning`;
//! - changing a namespace's `enforce` level warns about the existing pods that violate it.
//!
//! Every check of the `baseline` and `restricted` profiles is here, with the wording and order
//! of kube-apiserver's refusals; checks added in later policy versions (restricted
//! capabilities in 1.22, `runAsUser` in 1.23, sysctls in 1.27/1.29/1.32, SELinux types in
//! 1.31) apply from their version on. `audit` labels are validated but audit events are not
//! written (the dev cluster keeps no audit log).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::status::ApiError;

const PREFIX: &str = "pod-security.kubernetes.io/";
const MODES: [&str; 3] = ["enforce", "audit", "warn"];

/// A policy level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A level at a policy version (`None`: latest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    /// The minor version of `v1.<minor>`; None for `latest`.
    pub minor: Option<u32>,
}

impl LevelVersion {
    /// As kube-apiserver names it: `baseline:latest`, `restricted:v1.30`.
    pub fn name(&self) -> String {
        match self.minor {
            Some(m) => format!("{}:v1.{m}", self.level.as_str()),
            None => format!("{}:latest", self.level.as_str()),
        }
    }

    /// Whether checks introduced in `v1.<minor>` apply.
    fn since(&self, minor: u32) -> bool {
        self.minor.is_none_or(|m| m >= minor)
    }
}

/// A namespace's policy: what is enforced and what is warned about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub warn: LevelVersion,
}

impl Policy {
    /// Whether anything is checked at all.
    pub fn is_privileged(&self) -> bool {
        self.enforce.level == Level::Privileged && self.warn.level == Level::Privileged
    }
}

fn labels(namespace: &Value) -> Map<String, Value> {
    namespace
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn parse_version(s: &str) -> Option<Option<u32>> {
    if s == "latest" {
        return Some(None);
    }
    let minor = s.strip_prefix("v1.")?;
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    minor.parse().ok().map(Some)
}

/// The labels' problems, as kube-apiserver words them (`metadata.labels[<key>]: Invalid value:
/// "<v>": <why>`), in label order.
fn label_errors(namespace: &Value) -> Vec<(String, String)> {
    let labels = labels(namespace);
    let mut errors = Vec::new();
    for mode in MODES {
        let key = format!("{PREFIX}{mode}");
        if let Some(v) = labels.get(&key).and_then(Value::as_str)
            && Level::parse(v).is_none()
        {
            errors.push((
                format!("metadata.labels[{key}]"),
                format!(
                    "Invalid value: {}: must be one of privileged, baseline, restricted",
                    crate::auth::rbac::go_quote(v)
                ),
            ));
        }
        let key = format!("{PREFIX}{mode}-version");
        if let Some(v) = labels.get(&key).and_then(Value::as_str)
            && parse_version(v).is_none()
        {
            errors.push((
                format!("metadata.labels[{key}]"),
                format!(
                    "Invalid value: {}: must be \"latest\" or \"v1.x\"",
                    crate::auth::rbac::go_quote(v)
                ),
            ));
        }
    }
    errors
}

/// Refuses a namespace whose Pod Security labels are not valid (422).
pub fn validate_namespace(namespace: &Value) -> Result<(), ApiError> {
    let errors = label_errors(namespace);
    if errors.is_empty() {
        return Ok(());
    }
    let name = crate::store::meta_str(namespace, "name");
    let text: Vec<String> = errors.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let message = if text.len() == 1 {
        text[0].clone()
    } else {
        format!("[{}]", text.join(", "))
    };
    let mut e = ApiError::invalid("", "Namespace", &name, message);
    let causes: Vec<Value> = errors
        .iter()
        .map(|(field, m)| serde_json::json!({ "reason": "FieldValueInvalid", "message": m, "field": field }))
        .collect();
    if let Some(d) = e.details.as_mut() {
        d["causes"] = Value::Array(causes);
    }
    Err(e)
}

/// The policy of a namespace object (privileged when unlabelled; an invalid label counts as
/// the strictest, `restricted:latest`, as kube-apiserver does for namespaces that predate
/// validation).
pub fn policy(namespace: &Value) -> Policy {
    let labels = labels(namespace);
    let get = |k: &str| {
        labels
            .get(&format!("{PREFIX}{k}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let level = |mode: &str| get(mode).map(|v| Level::parse(&v).unwrap_or(Level::Restricted));
    let version =
        |mode: &str| get(&format!("{mode}-version")).map(|v| parse_version(&v).unwrap_or(None));
    let enforce = LevelVersion {
        level: level("enforce").unwrap_or(Level::Privileged),
        minor: version("enforce").unwrap_or(None),
    };
    // As kube-apiserver: `warn` unset follows `enforce` (level and, unless `warn-version` is
    // set, version); a `warn` level of its own is at `warn-version`, else latest.
    let warn = match level("warn") {
        Some(level) => LevelVersion {
            level,
            minor: version("warn").unwrap_or(None),
        },
        None => LevelVersion {
            level: enforce.level,
            minor: version("warn").unwrap_or(enforce.minor),
        },
    };
    Policy { enforce, warn }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub detail: String,
}

/// The failures as kube-apiserver lists them: `reason (detail), reason, ...`.
pub fn describe(failures: &[Failure]) -> String {
    failures
        .iter()
        .map(|f| {
            if f.detail.is_empty() {
                f.reason.clone()
            } else {
                format!("{} ({})", f.reason, f.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn quote(s: &str) -> String {
    crate::auth::rbac::go_quote(s)
}

fn join_quote<I: IntoIterator<Item = S>, S: AsRef<str>>(items: I) -> String {
    items
        .into_iter()
        .map(|s| quote(s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural<'a>(one: &'a str, many: &'a str, n: usize) -> &'a str {
    if n == 1 { one } else { many }
}

fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Every container of a pod spec: init containers, containers, ephemeral containers.
fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
        .collect()
}

fn name_of(c: &Value) -> String {
    c.get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn bool_at(v: &Value, pointer: &str) -> Option<bool> {
    v.pointer(pointer).and_then(Value::as_bool)
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Safe sysctls by the policy version that allowed them.
const SYSCTLS: &[(u32, &str)] = &[
    (0, "kernel.shm_rmid_forced"),
    (0, "net.ipv4.ip_local_port_range"),
    (0, "net.ipv4.tcp_syncookies"),
    (0, "net.ipv4.ping_group_range"),
    (0, "net.ipv4.ip_unprivileged_port_start"),
    (27, "net.ipv4.ip_local_reserved_ports"),
    (29, "net.ipv4.tcp_keepalive_time"),
    (29, "net.ipv4.tcp_fin_timeout"),
    (29, "net.ipv4.tcp_keepalive_intvl"),
    (29, "net.ipv4.tcp_keepalive_probes"),
    (32, "net.ipv4.tcp_rmem"),
    (32, "net.ipv4.tcp_wmem"),
];

/// The volume sources the restricted profile allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
    "image",
];

/// Whether a pod runs in a user namespace (`hostUsers: false`), which relaxes (from policy
/// v1.35) the checks that only matter as root on the node.
fn user_namespaced(spec: &Value) -> bool {
    bool_at(spec, "/hostUsers") == Some(false)
}

fn windows(spec: &Value) -> bool {
    str_at(spec, "/os/name") == Some("windows")
}

/// The checks of `level` (at its version) that `meta`/`spec` fail, in kube-apiserver's order:
/// the baseline checks, then the restricted ones.
pub fn evaluate(level: &LevelVersion, meta: &Value, spec: &Value) -> Vec<Failure> {
    let mut out = Vec::new();
    if level.level == Level::Privileged {
        return out;
    }
    let restricted = level.level == Level::Restricted;
    let win = restricted && windows(spec) && level.since(25);
    // In restricted, its own capabilities, volumes and seccomp checks replace baseline's.
    let restricted_capabilities = restricted && level.since(22);
    let mut push = |f: Option<Failure>| out.extend(f);
    push(app_armor(meta, spec));
    if !restricted_capabilities {
        push(capabilities_baseline(spec));
    }
    push(host_namespaces(spec));
    if !restricted {
        push(host_path_volumes(spec));
    }
    push(host_ports(spec));
    push(privileged(spec));
    // From policy v1.35 restricted has its own procMount check (strict, placed among its
    // checks), while baseline's lets user-namespaced pods unmask /proc.
    let restricted_proc_mount = restricted && level.since(35);
    if !restricted_proc_mount {
        push(proc_mount(level, spec));
    }
    push(se_linux(level, spec));
    if !restricted {
        push(seccomp(spec, false));
    }
    push(sysctls(level, spec));
    push(host_process(spec));
    if restricted {
        if !win {
            push(allow_privilege_escalation(spec));
        }
        if restricted_capabilities && !win {
            push(capabilities_restricted(spec));
        }
        if restricted_proc_mount {
            push(proc_mount(level, spec));
        }
        push(restricted_volumes(spec));
        push(run_as_non_root(level, spec));
        if level.since(23) {
            push(run_as_user(level, spec));
        }
        if !win {
            push(seccomp(spec, true));
        }
    }
    out
}

fn failure(reason: &str, detail: String) -> Option<Failure> {
    Some(Failure {
        reason: reason.to_string(),
        detail,
    })
}

fn app_armor(meta: &Value, spec: &Value) -> Option<Failure> {
    let allowed = |t: Option<&str>| matches!(t, None | Some("RuntimeDefault" | "Localhost"));
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(t) = spec
        .pointer("/securityContext/appArmorProfile")
        .map(|p| str_at(p, "/type"))
        && !allowed(t)
    {
        setters.push("pod".to_string());
        values.insert(t.unwrap_or_default().to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(t) = c
            .pointer("/securityContext/appArmorProfile")
            .map(|p| str_at(p, "/type"))
            && !allowed(t)
        {
            bad.push(name_of(c));
            values.insert(t.unwrap_or_default().to_string());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut values: Vec<String> = values.into_iter().collect();
    let mut annotations: Vec<String> = meta
        .pointer("/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| {
                    let v = v.as_str()?;
                    (k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                        && v != "runtime/default"
                        && !v.starts_with("localhost/"))
                    .then(|| format!("{k}={}", quote(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(plural("annotation", "annotations", annotations.len()).to_string());
        values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    failure(
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn capabilities_baseline(spec: &Value) -> Option<Failure> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let added = strings(c.pointer("/securityContext/capabilities/add"));
        let mut valid = true;
        for cap in added {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                valid = false;
                caps.insert(cap);
            }
        }
        if !valid {
            bad.push(name_of(c));
        }
    }
    (!bad.is_empty()).then(|| Failure {
        reason: "non-default capabilities".into(),
        detail: format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    })
}

fn host_namespaces(spec: &Value) -> Option<Failure> {
    let set: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .iter()
    .filter(|(k, _)| bool_at(spec, &format!("/{k}")) == Some(true))
    .map(|(_, text)| *text)
    .collect();
    (!set.is_empty()).then(|| Failure {
        reason: "host namespaces".into(),
        detail: set.join(", "),
    })
}

fn volumes(spec: &Value) -> Vec<&Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default()
}

fn host_path_volumes(spec: &Value) -> Option<Failure> {
    let bad: Vec<String> = volumes(spec)
        .into_iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name_of)
        .collect();
    (!bad.is_empty()).then(|| Failure {
        reason: "hostPath volumes".into(),
        detail: format!(
            "{} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    })
}

fn host_ports(spec: &Value) -> Option<Failure> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(hp) = p
                .get("hostPort")
                .and_then(Value::as_i64)
                .filter(|p| *p != 0)
            {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(name_of(c));
        }
    }
    (!bad.is_empty()).then(|| Failure {
        reason: "hostPort".into(),
        detail: format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
    })
}

fn privileged(spec: &Value) -> Option<Failure> {
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| bool_at(c, "/securityContext/privileged") == Some(true))
        .map(name_of)
        .collect();
    (!bad.is_empty()).then(|| Failure {
        reason: "privileged".into(),
        detail: format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    })
}

/// Baseline lets a pod in a user namespace unmask `/proc` from policy v1.35 on; restricted
/// never does.
fn proc_mount(level: &LevelVersion, spec: &Value) -> Option<Failure> {
    if user_namespaced(spec) && level.level == Level::Baseline && level.since(35) {
        return None;
    }
    let mut bad = Vec::new();
    let mut kinds = BTreeSet::new();
    for c in containers(spec) {
        if let Some(kind) = str_at(c, "/securityContext/procMount")
            && kind != "Default"
        {
            bad.push(name_of(c));
            kinds.insert(kind.to_string());
        }
    }
    (!bad.is_empty()).then(|| Failure {
        reason: "procMount".into(),
        detail: format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&kinds)
        ),
    })
}

fn se_linux(level: &LevelVersion, spec: &Value) -> Option<Failure> {
    let mut types: Vec<&str> = vec!["", "container_t", "container_init_t", "container_kvm_t"];
    if level.since(31) {
        types.push("container_engine_t");
    }
    let mut bad_types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |o: &Value| {
        let mut ok = true;
        let t = str_at(o, "/type").unwrap_or_default();
        if !types.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if !str_at(o, "/user").unwrap_or_default().is_empty() {
            ok = false;
            user = true;
        }
        if !str_at(o, "/role").unwrap_or_default().is_empty() {
            ok = false;
            role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(o) = spec
        .pointer("/securityContext/seLinuxOptions")
        .filter(|o| o.is_object())
        && !valid(o)
    {
        setters.push("pod".to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(o) = c
            .pointer("/securityContext/seLinuxOptions")
            .filter(|o| o.is_object())
            && !valid(o)
        {
            bad.push(name_of(c));
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            plural("type", "types", bad_types.len()),
            join_quote(&bad_types)
        ));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    failure(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

/// The seccomp check: baseline forbids `Unconfined`; restricted requires `RuntimeDefault` or
/// `Localhost` for every container (set on it or on the pod).
fn seccomp(spec: &Value, restricted: bool) -> Option<Failure> {
    let valid = |t: &str| {
        if restricted {
            matches!(t, "RuntimeDefault" | "Localhost")
        } else {
            t != "Unconfined"
        }
    };
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(t) = str_at(spec, "/securityContext/seccompProfile/type") {
        if valid(t) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t.to_string());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match str_at(c, "/securityContext/seccompProfile/type") {
            Some(t) if !valid(t) => {
                explicit.push(name_of(c));
                values.insert(t.to_string());
            }
            Some(_) => {}
            None if restricted && !pod_set => implicit.push(name_of(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return failure(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    (!implicit.is_empty()).then(|| Failure {
        reason: "seccompProfile".into(),
        detail: format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    })
}

fn sysctls(level: &LevelVersion, spec: &Value) -> Option<Failure> {
    let allowed: Vec<&str> = SYSCTLS
        .iter()
        .filter(|(since, _)| level.since(*since))
        .map(|(_, name)| *name)
        .collect();
    let forbidden: BTreeSet<String> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|n| !allowed.contains(n))
        .map(String::from)
        .collect();
    (!forbidden.is_empty()).then(|| Failure {
        reason: "forbidden sysctls".into(),
        detail: forbidden.into_iter().collect::<Vec<_>>().join(", "),
    })
}

fn host_process(spec: &Value) -> Option<Failure> {
    let mut setters = Vec::new();
    if bool_at(spec, "/securityContext/windowsOptions/hostProcess") == Some(true) {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| bool_at(c, "/securityContext/windowsOptions/hostProcess") == Some(true))
        .map(name_of)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    (!setters.is_empty()).then(|| Failure {
        reason: "hostProcess".into(),
        detail: format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    })
}

fn allow_privilege_escalation(spec: &Value) -> Option<Failure> {
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| bool_at(c, "/securityContext/allowPrivilegeEscalation") != Some(false))
        .map(name_of)
        .collect();
    (!bad.is_empty()).then(|| Failure {
        reason: "allowPrivilegeEscalation != false".into(),
        detail: format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    })
}

fn capabilities_restricted(spec: &Value) -> Option<Failure> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = c
            .pointer("/securityContext/capabilities")
            .filter(|c| c.is_object())
        else {
            missing_drop.push(name_of(c));
            continue;
        };
        if !strings(caps.get("drop")).iter().any(|d| d == "ALL") {
            missing_drop.push(name_of(c));
        }
        let mut bad = false;
        for cap in strings(caps.get("add")) {
            if cap != "NET_BIND_SERVICE" {
                bad = true;
                forbidden.insert(cap);
            }
        }
        if bad {
            adding.push(name_of(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&forbidden)
        ));
    }
    (!details.is_empty()).then(|| Failure {
        reason: "unrestricted capabilities".into(),
        detail: details.join("; "),
    })
}

fn restricted_volumes(spec: &Value) -> Option<Failure> {
    let mut bad = Vec::new();
    let mut kinds = BTreeSet::new();
    for v in volumes(spec) {
        let sources: Vec<&String> = v
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, val)| k.as_str() != "name" && !val.is_null())
                    .map(|(k, _)| k)
                    .collect()
            })
            .unwrap_or_default();
        if sources
            .iter()
            .any(|s| RESTRICTED_VOLUMES.contains(&s.as_str()))
        {
            continue;
        }
        bad.push(name_of(v));
        kinds.insert(
            sources
                .first()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown".into()),
        );
    }
    (!bad.is_empty()).then(|| Failure {
        reason: "restricted volume types".into(),
        detail: format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad),
            plural("uses", "use", bad.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                kinds.len()
            ),
            join_quote(&kinds)
        ),
    })
}

/// From policy v1.35, a pod in a user namespace may run as root in it.
fn run_as_non_root(level: &LevelVersion, spec: &Value) -> Option<Failure> {
    if user_namespaced(spec) && level.since(35) {
        return None;
    }
    let mut setters = Vec::new();
    let mut pod_true = false;
    match bool_at(spec, "/securityContext/runAsNonRoot") {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_true = true,
        None => {}
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match bool_at(c, "/securityContext/runAsNonRoot") {
            Some(false) => explicit.push(name_of(c)),
            Some(true) => {}
            None if !pod_true => implicit.push(name_of(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return failure(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    (!implicit.is_empty()).then(|| Failure {
        reason: "runAsNonRoot != true".into(),
        detail: format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    })
}

fn run_as_user(level: &LevelVersion, spec: &Value) -> Option<Failure> {
    if user_namespaced(spec) && level.since(35) {
        return None;
    }
    let root = |v: &Value| {
        v.pointer("/securityContext/runAsUser")
            .and_then(Value::as_i64)
            == Some(0)
    };
    let mut setters = Vec::new();
    if root(spec) {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| root(c))
        .map(name_of)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    (!setters.is_empty()).then(|| Failure {
        reason: "runAsUser=0".into(),
        detail: format!("{} must not set runAsUser=0", setters.join(" and ")),
    })
}

/// Whether Pod Security looks into objects of `group`/`resource` (pods and the workloads that
/// make them).
pub fn applies_to(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "pods" | "podtemplates" | "replicationcontrollers")
            | (
                "apps",
                "deployments" | "replicasets" | "statefulsets" | "daemonsets"
            )
            | ("batch", "jobs" | "cronjobs")
    )
}

/// The pod (metadata, spec) a workload object makes, for the kinds Pod Security looks into.
pub fn pod_template<'a>(
    group: &str,
    resource: &str,
    obj: &'a Value,
) -> Option<(&'a Value, &'a Value)> {
    let template = match (group, resource) {
        ("", "pods") => return Some((obj.get("metadata")?, obj.get("spec")?)),
        ("", "podtemplates") => obj.get("template")?,
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs")
        | ("", "replicationcontrollers") => obj.pointer("/spec/template")?,
        ("batch", "cronjobs") => obj.pointer("/spec/jobTemplate/spec/template")?,
        _ => return None,
    };
    static EMPTY: Value = Value::Null;
    Some((
        template.get("metadata").unwrap_or(&EMPTY),
        template.get("spec").unwrap_or(&EMPTY),
    ))
}

/// What admission makes of a write of a pod or workload object in a namespace with `policy`:
/// Err for a pod that violates `enforce`; otherwise the warnings to answer with.
pub fn admit(
    policy: &Policy,
    group: &str,
    resource: &str,
    old: Option<&Value>,
    new: &Value,
) -> Result<Vec<String>, ApiError> {
    let Some((meta, spec)) = pod_template(group, resource, new) else {
        return Ok(Vec::new());
    };
    let is_pod = group.is_empty() && resource == "pods";
    // An update that leaves the pod (template) as it was is not looked at again.
    if let Some(old) = old
        && pod_template(group, resource, old).is_some_and(|(m, s)| {
            s == spec && (!is_pod || m.get("annotations") == meta.get("annotations"))
        })
    {
        return Ok(Vec::new());
    }
    if is_pod {
        let failures = evaluate(&policy.enforce, meta, spec);
        if !failures.is_empty() {
            let name = crate::store::meta_str(new, "name");
            return Err(ApiError::forbidden_for(
                "",
                "pods",
                &name,
                &format!(
                    "violates PodSecurity {}: {}",
                    quote(&policy.enforce.name()),
                    describe(&failures)
                ),
            ));
        }
    }
    let failures = evaluate(&policy.warn, meta, spec);
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "would violate PodSecurity {}: {}",
        quote(&policy.warn.name()),
        describe(&failures)
    )])
}

/// The warnings for a namespace whose `enforce` level changed from `old` to `new`: which of
/// its `pods` (name, metadata, spec) violate the new level, grouped by what they violate.
pub fn namespace_warnings(
    namespace: &str,
    old: &Value,
    new: &Value,
    pods: &[(String, Value, Value)],
) -> Vec<String> {
    let (before, after) = (policy(old).enforce, policy(new).enforce);
    if before == after || after.level == Level::Privileged {
        return Vec::new();
    }
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, meta, spec) in pods {
        let failures = evaluate(&after, meta, spec);
        if !failures.is_empty() {
            let reasons: Vec<String> = failures.into_iter().map(|f| f.reason).collect();
            groups
                .entry(reasons.join(", "))
                .or_default()
                .push(name.clone());
        }
    }
    if groups.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<(String, String)> = groups
        .into_iter()
        .map(|(reasons, mut names)| {
            names.sort();
            let label = match names.len() {
                1 => names[0].clone(),
                n => format!(
                    "{} (and {} other {})",
                    names[0],
                    n - 1,
                    plural("pod", "pods", n - 1)
                ),
            };
            (label, reasons)
        })
        .collect();
    lines.sort();
    let mut out = vec![format!(
        "existing pods in namespace {} violate the new PodSecurity enforce level {}",
        quote(namespace),
        quote(&after.name())
    )];
    out.extend(
        lines
            .into_iter()
            .map(|(label, reasons)| format!("{label}: {reasons}")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn baseline() -> LevelVersion {
        LevelVersion {
            level: Level::Baseline,
            minor: None,
        }
    }

    #[test]
    fn the_baseline_profile_refuses_the_node_s_root() {
        let spec = json!({
            "hostPID": true,
            "containers": [ { "name": "c", "securityContext": { "privileged": true } } ],
            "volumes": [ { "name": "root", "hostPath": { "path": "/" } } ],
        });
        assert_eq!(
            describe(&evaluate(&baseline(), &json!({}), &spec)),
            "host namespaces (hostPID=true), hostPath volumes (volume \"root\"), privileged (container \"c\" must not set securityContext.privileged=true)"
        );
        let fine = json!({ "containers": [ { "name": "c", "securityContext": { "capabilities": { "add": ["CHOWN"] } } } ] });
        assert!(evaluate(&baseline(), &json!({}), &fine).is_empty());
    }

    #[test]
    fn labels_set_the_policy_and_warn_defaults_to_enforce() {
        let ns = json!({ "metadata": { "name": "x", "labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.30",
        } } });
        let p = policy(&ns);
        assert_eq!(p.enforce.name(), "baseline:v1.30");
        assert_eq!(p.warn, p.enforce);
        // A warn level of its own does not take enforce's version.
        let ns = json!({ "metadata": { "name": "x", "labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.30",
            "pod-security.kubernetes.io/warn": "restricted",
        } } });
        assert_eq!(policy(&ns).warn.name(), "restricted:latest");
        assert!(policy(&json!({})).is_privileged());
        let bad = json!({ "metadata": { "name": "x", "labels": { "pod-security.kubernetes.io/warn": "nope" } } });
        let e = validate_namespace(&bad).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("must be one of privileged, baseline, restricted"),
            "{}",
            e.message
        );
    }
}
