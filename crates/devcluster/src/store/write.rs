//! Writes: create, update, patch (including server-side apply) and delete.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::prepare::{
    bump_generation, carry_server_fields, check_type, init_server_fields, kind_defaults, now,
    resolve_name, same_content, separate_status,
};
use super::{State, Store, meta_str, present, set_meta};
use crate::apply::{ApplyRequest, apply, restrict_config, track_update};
use crate::crd;
use crate::patch::{PatchKind, apply_patch};
use crate::resources::{GroupResource, ResourceType};
use crate::status::ApiError;

/// A check of a write's final object, run under the store lock just before it is committed
/// (dry runs included): the caller's admission (RBAC escalation prevention, Pod Security).
/// It gets the type, the stored object (None for a create) and the object about to be stored.
pub type WriteCheck =
    Arc<dyn Fn(&ResourceType, Option<&Value>, &Value) -> Result<(), ApiError> + Send + Sync>;

/// Options common to writes.
#[derive(Clone)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and compute the result, store nothing.
    pub dry_run: bool,
    /// `fieldManager`, or the default derived from the User-Agent.
    pub manager: String,
    /// `force` for server-side apply.
    pub force: bool,
    /// Admission of the final object; None for the server's own writes.
    pub check: Option<WriteCheck>,
}

impl std::fmt::Debug for WriteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteOptions")
            .field("dry_run", &self.dry_run)
            .field("manager", &self.manager)
            .field("force", &self.force)
            .field("check", &self.check.is_some())
            .finish()
    }
}

impl WriteOptions {
    pub fn internal(manager: &str) -> WriteOptions {
        WriteOptions {
            dry_run: false,
            manager: manager.to_string(),
            force: false,
            check: None,
        }
    }

    fn admit(&self, rt: &ResourceType, old: Option<&Value>, new: &Value) -> Result<(), ApiError> {
        match &self.check {
            Some(check) => check(rt, old, new),
            None => Ok(()),
        }
    }
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

impl Store {
    /// POST: creates an object; 409 AlreadyExists when the name is taken.
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.lock().create(rt, namespace, body, opts, &self.changed)
    }

    /// PUT: replaces an object; 409 Conflict on a stale resourceVersion.
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let mut body = body;
        check_type(rt, &mut body)?;
        check_identity(rt, &body, namespace, name)?;
        let old = st.existing(rt, namespace, name)?;
        check_rv_precondition(rt, &old, &body)?;
        let new = separate_status(rt, &old, body, part == Part::Status);
        st.finish_update(rt, old, new, part, opts, true, &self.changed)
    }

    /// PATCH in any of the four formats. Returns the object and whether it was created
    /// (only server-side apply creates).
    #[allow(clippy::too_many_arguments)] // mirrors the REST call: object, format, body, subresource, options
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        part: Part,
        opts: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        if kind == PatchKind::Apply {
            return st.server_side_apply(rt, namespace, name, body, part, opts, &self.changed);
        }
        if kind == PatchKind::Strategic && rt.custom {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let old = st.existing(rt, namespace, name)?;
        let mut new = apply_patch(kind, &present(rt, &old), body)?;
        check_type(rt, &mut new)?;
        check_identity(rt, &new, namespace, name)?;
        check_rv_precondition(rt, &old, &new)?;
        let new = separate_status(rt, &old, new, part == Part::Status);
        Ok((
            st.finish_update(rt, old, new, part, opts, true, &self.changed)?,
            false,
        ))
    }

    /// Changes an object with a function (controllers). Returns None when it is gone.
    pub fn mutate(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        part: Part,
        manager: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Option<Value>, ApiError> {
        let mut st = self.lock();
        let Some(old) = st.get(&rt.gr(), namespace, name).cloned() else {
            return Ok(None);
        };
        let mut new = old.clone();
        f(&mut new);
        let new = separate_status(rt, &old, new, part == Part::Status);
        st.finish_update(
            rt,
            old,
            new,
            part,
            &WriteOptions::internal(manager),
            true,
            &self.changed,
        )
        .map(Some)
    }

    /// DELETE: removes the object, or marks it with deletionTimestamp while finalizers remain.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        self.lock().delete(rt, namespace, name, opts, &self.changed)
    }
}

impl State {
    fn existing(&self, rt: &ResourceType, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.get(&rt.gr(), namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    pub(super) fn create(
        &mut self,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
        changed: &watch::Sender<u64>,
    ) -> Result<Value, ApiError> {
        check_type(rt, &mut obj)?;
        let name = resolve_name(rt, &mut obj)?;
        let namespace = self.scope_namespace(rt, namespace, &mut obj)?;
        if self.get(&rt.gr(), &namespace, &name).is_some() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        let now = now();
        init_server_fields(rt, &mut obj, &now);
        kind_defaults(rt, &mut obj, true, &now)?;
        self.allocate(rt, &mut obj);
        self.check_schema(rt, &mut obj)?;
        track_update(
            None,
            &mut obj,
            &opts.manager,
            !rt.custom,
            "",
            &rt.api_version(),
            &now,
        );
        opts.admit(rt, None, &obj)?;
        self.commit_create(rt, obj, opts, changed)
    }

    fn commit_create(
        &mut self,
        rt: &ResourceType,
        obj: Value,
        opts: &WriteOptions,
        changed: &watch::Sender<u64>,
    ) -> Result<Value, ApiError> {
        if opts.dry_run {
            return Ok(present(rt, &obj));
        }
        let stored = self.commit(&rt.gr(), Some(obj), None, changed)?;
        if crd::is_crd(rt) {
            self.register_crd(&stored)?;
        }
        Ok(present(rt, &stored))
    }

    /// Validates the namespace of a create: namespaced kinds need an existing, active
    /// namespace that matches the body's; cluster-scoped kinds have none.
    fn scope_namespace(
        &self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        obj: &mut Value,
    ) -> Result<String, ApiError> {
        if !rt.namespaced {
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            return Ok(String::new());
        }
        let body_ns = meta_str(obj, "namespace");
        let ns = url_ns.map(String::from).unwrap_or_else(|| body_ns.clone());
        if ns.is_empty() {
            return Err(ApiError::bad_request(
                "the namespace of the object must be set",
            ));
        }
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        set_meta(obj, "namespace", Value::String(ns.clone()));
        let ns_gr = GroupResource {
            group: String::new(),
            resource: "namespaces".into(),
        };
        match self.get(&ns_gr, "", &ns) {
            None => Err(ApiError::not_found("", "namespaces", &ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.qualified_name(),
                    meta_str(obj, "name")
                )))
            }
            Some(_) => Ok(ns),
        }
    }

    /// Completes any update: server fields, managed fields, generation, finalizer-driven
    /// removal, no-op detection, commit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_update(
        &mut self,
        rt: &ResourceType,
        old: Value,
        mut new: Value,
        part: Part,
        opts: &WriteOptions,
        track: bool,
        changed: &watch::Sender<u64>,
    ) -> Result<Value, ApiError> {
        let now = now();
        carry_server_fields(&old, &mut new);
        keep_cluster_ip(rt, &old, &mut new);
        kind_defaults(rt, &mut new, false, &now)?;
        self.check_schema(rt, &mut new)?;
        if track {
            let sub = if part == Part::Status { "status" } else { "" };
            track_update(
                Some(&old),
                &mut new,
                &opts.manager,
                !rt.custom,
                sub,
                &rt.api_version(),
                &now,
            );
        }
        bump_generation(rt, &old, &mut new);
        opts.admit(rt, Some(&old), &new)?;
        let terminating = old.pointer("/metadata/deletionTimestamp").is_some();
        if terminating && ready_to_remove(rt, &new) {
            if opts.dry_run {
                return Ok(present(rt, &new));
            }
            let mut gone = new;
            set_meta(
                &mut gone,
                "resourceVersion",
                old["metadata"]["resourceVersion"].clone(),
            );
            let removed = self.commit(&rt.gr(), None, Some(gone), changed)?;
            self.after_delete(rt, &removed, changed)?;
            return Ok(present(rt, &removed));
        }
        if same_content(&old, &new) || opts.dry_run {
            let shown = if opts.dry_run { new } else { old };
            return Ok(present(rt, &shown));
        }
        let stored = self.commit(&rt.gr(), Some(new), Some(old), changed)?;
        if crd::is_crd(rt) {
            self.register_crd(&stored)?;
        }
        Ok(present(rt, &stored))
    }

    #[allow(clippy::too_many_arguments)]
    fn server_side_apply(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: &[u8],
        part: Part,
        opts: &WriteOptions,
        changed: &watch::Sender<u64>,
    ) -> Result<(Value, bool), ApiError> {
        if opts.manager.is_empty() {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        let mut config: Value = serde_saphyr::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if config
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
            || config
                .get("kind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply configuration",
            ));
        }
        check_type(rt, &mut config)?;
        check_identity(rt, &config, namespace, name)?;
        if rt.has_status || part == Part::Status {
            config = restrict_config(&config, part == Part::Status);
        }
        let req = ApplyRequest {
            manager: &opts.manager,
            force: opts.force,
            builtin: !rt.custom,
            subresource: if part == Part::Status { "status" } else { "" },
            api_version: &rt.api_version(),
            now: &now(),
        };
        match self.get(&rt.gr(), namespace, name).cloned() {
            None if part == Part::Status => Err(ApiError::not_found(&rt.group, &rt.plural, name)),
            None => {
                let mut obj = apply(None, &config, &req)?;
                set_meta(&mut obj, "name", Value::String(name.to_string()));
                let ns = rt.namespaced.then_some(namespace);
                let created_at = now();
                self.scope_namespace(rt, ns, &mut obj)?;
                validate_new(rt, name)?;
                init_server_fields(rt, &mut obj, &created_at);
                kind_defaults(rt, &mut obj, true, &created_at)?;
                self.allocate(rt, &mut obj);
                self.check_schema(rt, &mut obj)?;
                opts.admit(rt, None, &obj)?;
                Ok((self.commit_create(rt, obj, opts, changed)?, true))
            }
            Some(old) => {
                check_rv_precondition(rt, &old, &config)?;
                let new = apply(Some(&old), &config, &req)?;
                let new = separate_status(rt, &old, new, part == Part::Status);
                Ok((
                    self.finish_update(rt, old, new, part, opts, false, changed)?,
                    false,
                ))
            }
        }
    }

    pub(super) fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
        changed: &watch::Sender<u64>,
    ) -> Result<Value, ApiError> {
        let old = self.existing(rt, namespace, name)?;
        if let Some(uid) = &opts.precondition_uid
            && meta_str(&old, "uid") != *uid
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && meta_str(&old, "resourceVersion") != *rv
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut obj = old.clone();
        let extra = match opts.propagation {
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
            Propagation::Background => None,
        };
        if let Some(f) = extra {
            let mut list = finalizers(&obj);
            if !list.iter().any(|x| x == f) {
                list.push(f.to_string());
                set_meta(&mut obj, "finalizers", json!(list));
            }
        }
        if is_namespace(rt) {
            obj["status"]["phase"] = Value::String("Terminating".into());
        }
        if is_namespace(rt) || !finalizers(&obj).is_empty() {
            if obj.pointer("/metadata/deletionTimestamp").is_none() {
                set_meta(&mut obj, "deletionTimestamp", Value::String(now()));
                set_meta(&mut obj, "deletionGracePeriodSeconds", json!(0));
            }
            if opts.dry_run || same_content(&old, &obj) {
                return Ok(present(rt, &obj));
            }
            return Ok(present(
                rt,
                &self.commit(&rt.gr(), Some(obj), Some(old), changed)?,
            ));
        }
        if opts.dry_run {
            return Ok(present(rt, &obj));
        }
        let removed = self.commit(&rt.gr(), None, Some(obj), changed)?;
        self.after_delete(rt, &removed, changed)?;
        Ok(present(rt, &removed))
    }

    /// A deleted CRD takes its custom resources and its types with it.
    fn after_delete(
        &mut self,
        rt: &ResourceType,
        removed: &Value,
        changed: &watch::Sender<u64>,
    ) -> Result<(), ApiError> {
        if !crd::is_crd(rt) {
            return Ok(());
        }
        let group = removed
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let plural = removed
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let gr = GroupResource {
            group: group.clone(),
            resource: plural.clone(),
        };
        let doomed: Vec<Value> = self
            .objects
            .get(&gr)
            .map(|c| c.values().map(|o| Value::clone(o)).collect())
            .unwrap_or_default();
        for obj in doomed {
            self.commit(&gr, None, Some(obj), changed)?;
        }
        self.registry.remove_custom(&group, &plural);
        Ok(())
    }

    /// Gives a new Service its clusterIP (the allocator a real apiserver runs on create).
    fn allocate(&self, rt: &ResourceType, obj: &mut Value) {
        if rt.custom || !rt.group.is_empty() || rt.kind != "Service" {
            return;
        }
        let used = self
            .objects
            .get(&rt.gr())
            .into_iter()
            .flat_map(|c| c.values())
            .filter_map(|s| {
                s.pointer("/spec/clusterIP")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect();
        super::defaults::allocate_cluster_ip(obj, &used);
    }

    /// Prunes, defaults and validates a custom resource against its CRD's schema for
    /// the version being written.
    fn check_schema(&self, rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
        if !rt.custom {
            return Ok(());
        }
        let crd_gr = GroupResource {
            group: "apiextensions.k8s.io".into(),
            resource: "customresourcedefinitions".into(),
        };
        let Some(crd_obj) = self.get(&crd_gr, "", &format!("{}.{}", rt.plural, rt.group)) else {
            return Ok(());
        };
        let schema = crd_obj
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter()
                    .find(|v| v.get("name").and_then(Value::as_str) == Some(rt.version.as_str()))
            })
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"));
        let Some(schema) = schema else { return Ok(()) };
        crate::schema::apply(schema, obj).map_err(|errors| {
            let message = if errors.len() == 1 {
                errors.join("")
            } else {
                format!("[{}]", errors.join(", "))
            };
            ApiError::invalid(
                &rt.group,
                &format!("{}.{}", rt.kind, rt.group),
                &meta_str(obj, "name"),
                message,
            )
        })
    }

    fn register_crd(&mut self, crd_obj: &Value) -> Result<(), ApiError> {
        let types = crd::resource_types(crd_obj)?;
        if let Some(first) = types.first() {
            self.registry.remove_custom(&first.group, &first.plural);
        }
        for t in types {
            self.registry.insert(t);
        }
        Ok(())
    }
}

/// A Service's clusterIP is immutable; an update that omits it keeps the allocated one.
fn keep_cluster_ip(rt: &ResourceType, old: &Value, new: &mut Value) {
    if rt.custom || !rt.group.is_empty() || rt.kind != "Service" {
        return;
    }
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if let (Some(v), Some(spec)) = (
            old.pointer(&format!("/spec/{field}")),
            new.get_mut("spec").and_then(Value::as_object_mut),
        ) {
            spec.entry(field.to_string()).or_insert_with(|| v.clone());
        }
    }
}

/// A terminating object goes away once no finalizer remains; a namespace also waits
/// for its `spec.finalizers` (the namespace controller's "kubernetes").
fn ready_to_remove(rt: &ResourceType, obj: &Value) -> bool {
    let spec_done = !is_namespace(rt)
        || obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
    finalizers(obj).is_empty() && spec_done
}

fn is_namespace(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "namespaces"
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn validate_new(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    super::prepare::validate_name(rt, name)
}

/// The body's name and namespace must match the URL's.
fn check_identity(
    rt: &ResourceType,
    body: &Value,
    namespace: &str,
    name: &str,
) -> Result<(), ApiError> {
    let body_name = meta_str(body, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(body, "namespace");
    if rt.namespaced && !body_ns.is_empty() && body_ns != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// A resourceVersion in the body is a precondition: it must be the stored one.
fn check_rv_precondition(rt: &ResourceType, old: &Value, body: &Value) -> Result<(), ApiError> {
    let wanted = meta_str(body, "resourceVersion");
    if !wanted.is_empty() && wanted != meta_str(old, "resourceVersion") {
        return Err(ApiError::conflict(
            &rt.group,
            &rt.plural,
            &meta_str(old, "name"),
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    Ok(())
}
