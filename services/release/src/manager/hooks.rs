//! Running chart hooks for one event.

use super::*;

impl ReleaseManager {
    /// Runs the hooks for `event` one after another; the first failure stops the operation.
    pub(super) async fn run_hooks(
        &self,
        applier: &Applier,
        hooks: &[Hook],
        event: HookEvent,
        name: &str,
        namespace: &str,
    ) -> Result<(), ReleaseError> {
        for hook in helm_hooks::for_event(hooks, event) {
            self.run_hook(applier, hook, event, name, namespace).await?;
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(hook.event = event.as_str(), hook.name = %hook.name))]
    async fn run_hook(
        &self,
        applier: &Applier,
        hook: &Hook,
        event: HookEvent,
        name: &str,
        namespace: &str,
    ) -> Result<(), ReleaseError> {
        if hook.has_policy(DeletePolicy::BeforeHookCreation) {
            applier
                .delete(&hook.object, name, namespace, DELETE_WAIT)
                .await?;
        }
        applier.apply(&hook.object, name, namespace).await?;
        match self
            .applier
            .wait_complete(&hook.object, namespace, HOOK_WAIT)
            .await
        {
            Ok(()) => {
                if hook.has_policy(DeletePolicy::HookSucceeded) {
                    applier
                        .delete(&hook.object, name, namespace, DELETE_WAIT)
                        .await?;
                }
                Ok(())
            }
            Err(e) => {
                if hook.has_policy(DeletePolicy::HookFailed) {
                    applier
                        .delete(&hook.object, name, namespace, DELETE_WAIT)
                        .await?;
                }
                Err(e.into())
            }
        }
    }
}
