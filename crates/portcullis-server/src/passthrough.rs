//! Everything but tools: resources, resource templates, prompts,
//! completions, logging and resource subscriptions, served by a
//! [`PassthroughProvider`] beside a [`ToolServer`](crate::ToolServer)'s tools.
//!
//! A tool server without a provider serves tools only (and answers the other
//! methods `-32601`, advertising nothing else). With one
//! ([`ToolServerBuilder::passthrough`](crate::ToolServerBuilder::passthrough)),
//! the capabilities the provider reports are advertised — `resources`
//! (with `subscribe` and `listChanged`), `prompts`, `completions`,
//! `logging` — and every such request is handed to it, with the request's
//! context, so the provider can reach the calling client later (a log
//! message, `resources/updated`, a list change). A 2026-07-28 client's
//! `subscriptions/listen` for prompt or resource changes and resource URIs
//! is handed to [`PassthroughProvider::listen`].
//!
//! What a provider answers to `resources/read` and `prompts/get` does not
//! reach the client as it is: the tool server seals it on the way out
//! with the tool results' budget and rules (a read framed like a tool's
//! output, a prompt cleaned and capped but not framed; see
//! `portcullis_catalog::framing::seal_resource` and `seal_prompt`).
//!
//! The gateway binary implements the provider over its upstreams; this
//! crate knows nothing about them.

// Logging and resources/subscribe are deprecated by SEP-2577 (2026-07-28)
// but every 2025-era client still uses them: they are served.
#![allow(deprecated)]

use futures::future::BoxFuture;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability,
    ServerCapabilities, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer};

/// What a provider serves; each `true` is advertised in the server's
/// capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassthroughCapabilities {
    /// `resources/list`, `resources/templates/list`, `resources/read`.
    pub resources: bool,
    /// `resources/subscribe` and `resources/unsubscribe`.
    pub subscribe: bool,
    /// `notifications/resources/list_changed` may be sent.
    pub resources_list_changed: bool,
    /// `prompts/list` and `prompts/get`.
    pub prompts: bool,
    /// `notifications/prompts/list_changed` may be sent.
    pub prompts_list_changed: bool,
    /// `completion/complete`.
    pub completions: bool,
    /// `logging/setLevel` and `notifications/message`.
    pub logging: bool,
}

impl PassthroughCapabilities {
    /// Adds these capabilities to `capabilities`.
    pub fn advertise(&self, capabilities: &mut ServerCapabilities) {
        if self.resources {
            let mut resources = ResourcesCapability::default();
            resources.subscribe = self.subscribe.then_some(true);
            resources.list_changed = self.resources_list_changed.then_some(true);
            capabilities.resources = Some(resources);
        }
        if self.prompts {
            let mut prompts = PromptsCapability::default();
            prompts.list_changed = self.prompts_list_changed.then_some(true);
            capabilities.prompts = Some(prompts);
        }
        if self.completions {
            capabilities.completions = Some(Default::default());
        }
        if self.logging {
            capabilities.logging = Some(Default::default());
        }
    }

    /// The part of a 2026-07-28 `subscriptions/listen` filter this provider
    /// honours, added to `accepted`: list changes it advertises, and every
    /// resource URI asked for when it serves subscriptions.
    pub fn accept(&self, requested: &SubscriptionFilter, accepted: &mut SubscriptionFilter) {
        if self.prompts && self.prompts_list_changed {
            accepted.prompts_list_changed = requested.prompts_list_changed;
        }
        if self.resources && self.resources_list_changed {
            accepted.resources_list_changed = requested.resources_list_changed;
        }
        if self.resources && self.subscribe {
            accepted.resource_subscriptions = requested.resource_subscriptions.clone();
        }
    }
}

/// Serves the MCP methods beyond tools. Every method gets the request's
/// context (its peer is the calling client's session).
///
/// Errors are JSON-RPC errors and reach the client as they are: use the
/// codes a server would (`-32602` for an unknown prompt, `-32002` with
/// `data.uri` for a resource that does not exist).
pub trait PassthroughProvider: Send + Sync + 'static {
    /// What this provider serves (called on every `get_info`: keep it cheap).
    fn capabilities(&self) -> PassthroughCapabilities;

    /// `resources/list`.
    fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListResourcesResult, ErrorData>>;

    /// `resources/templates/list`.
    fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListResourceTemplatesResult, ErrorData>>;

    /// `resources/read`.
    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ReadResourceResponse, ErrorData>>;

    /// `resources/subscribe` (2025-era clients).
    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>>;

    /// `resources/unsubscribe` (2025-era clients).
    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>>;

    /// `prompts/list`.
    fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListPromptsResult, ErrorData>>;

    /// `prompts/get`.
    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<GetPromptResponse, ErrorData>>;

    /// `completion/complete`.
    fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<CompleteResult, ErrorData>>;

    /// `logging/setLevel` (2025-era clients).
    fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>>;

    /// A 2025-era client finished its handshake (`notifications/initialized`):
    /// its session can be sent notifications from now on. Default: nothing.
    fn session_started(&self, peer: Peer<RoleServer>) {
        let _ = peer;
    }

    /// A 2026-07-28 `subscriptions/listen` whose accepted filter includes
    /// what [`PassthroughCapabilities::accept`] added. Runs until the client
    /// cancels it. Default: stays quiet until then.
    fn listen(&self, context: SubscriptionContext) -> BoxFuture<'_, Result<(), ErrorData>> {
        Box::pin(async move {
            context.cancelled().await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_advertised_as_declared() {
        let mut capabilities = ServerCapabilities::default();
        PassthroughCapabilities {
            resources: true,
            subscribe: true,
            prompts: true,
            logging: true,
            ..Default::default()
        }
        .advertise(&mut capabilities);
        let value = serde_json::to_value(&capabilities).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"resources": {"subscribe": true}, "prompts": {}, "logging": {}})
        );
    }

    #[test]
    fn listen_filters_keep_only_what_is_served() {
        let requested = SubscriptionFilter::builder()
            .prompts_list_changed()
            .resources_list_changed()
            .resource_subscription("a://x")
            .build();
        let mut accepted = SubscriptionFilter::builder().tools_list_changed().build();
        PassthroughCapabilities {
            prompts: true,
            prompts_list_changed: true,
            resources: true,
            ..Default::default()
        }
        .accept(&requested, &mut accepted);
        assert_eq!(accepted.tools_list_changed, Some(true));
        assert_eq!(accepted.prompts_list_changed, Some(true));
        assert_eq!(accepted.resources_list_changed, None);
        assert_eq!(accepted.resource_subscriptions, None);
    }
}
