//! Watching one applied object, for drift detection: a kube-rs watcher on the object's
//! resource, narrowed to its name with a field selector.

use super::{Applier, ApplyError, ObjectKey};
use futures::Stream;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::Value;

impl Applier {
    /// The object's key and a stream of watch events for it (only it, by field selector).
    /// The watcher re-lists and re-watches on its own after errors, so the stream only ends
    /// when dropped.
    pub async fn watch_object(
        &self,
        object: &Value,
        release_ns: &str,
    ) -> Result<
        (
            ObjectKey,
            impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + use<>,
        ),
        ApplyError,
    > {
        let (key, ar) = self.key_for(object, release_ns).await?;
        let api = self.api(&key, &ar);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", key.name));
        Ok((key, watcher(api, config)))
    }
}
