//! `count_tokens`: the provider's own count when its kind offers one (Anthropic: the body as the
//! client sent it, only `model` rewritten, with the client's `anthropic-beta`), else a local
//! estimate; always said which (`x-keyhaven-token-count: exact|estimate` and the call row's
//! response body), and recorded as a call row.

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::now_ms;
use crate::config::ProviderKind;
use crate::model::{self, CallFinish, CallStart, CallStatus, Usage};
use crate::provider::emulation;
use crate::provider::error::ProviderError;
use crate::provider::gateway::{CallContext, Gateway};
use crate::provider::tokens::{self, Family};
use crate::provider::upstream;
use crate::secrets::BoundKey;

/// What a client asked to count.
#[derive(Debug, Clone)]
pub struct CountRequest {
    /// The model name the client asked for.
    pub model: String,
    /// The body as the client sent it (a JSON object in Anthropic's shape).
    pub body: serde_json::Value,
    /// The body decoded, when the request decoder accepts it (the estimate is finer then).
    pub decoded: Option<model::Request>,
    /// The client's `anthropic-beta` header, passed on to an Anthropic provider.
    pub beta: Option<String>,
}

/// A token count and whether the provider made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCount {
    pub input_tokens: u64,
    /// True when the provider counted; false for the local estimate.
    pub exact: bool,
}

impl TokenCount {
    /// `exact` or `estimate` (the `x-keyhaven-token-count` header).
    pub fn label(&self) -> &'static str {
        if self.exact { "exact" } else { "estimate" }
    }
}

impl Gateway {
    /// Counts the input tokens of `req` for its model (a group counts for its first model).
    /// Emulated-tools models count the prompt they would really get (contract included). A
    /// provider count that fails falls back to the estimate, which the answer says it is.
    /// The call row has dialect `ctx.dialect`, zero usage (counting is not billed), and the
    /// answer as its response body: `{"input_tokens": N, "token_count": "exact"|"estimate"}`.
    pub async fn count_tokens(&self, req: CountRequest, ctx: CallContext) -> Result<TokenCount, ProviderError> {
        let started = Instant::now();
        let started_ms = now_ms();
        let route = self.catalog().candidates(&req.model).into_iter().next();
        let ack = self.sink.start(CallStart {
            id: ctx.id.clone(),
            started_ms,
            dialect: ctx.dialect.to_owned(),
            client: ctx.client.clone(),
            model: req.model.clone(),
            model_id: route.as_ref().map(|r| r.model.id.clone()),
            provider: route.as_ref().map(|r| r.provider.name.clone()),
            upstream_model: route.as_ref().map(|r| r.model.upstream.clone()),
            stream: false,
            request_body: None,
            conversation_id: ctx.conversation_id.clone(),
            request_id: ctx.request_id.clone(),
            session_id: ctx.session_id.clone(),
            budget_downgrade: None,
        });
        let result = match &route {
            None => Err(ProviderError::UnknownModel(req.model.clone())),
            Some(route) => {
                // Emulated tools: count the prompt the upstream would really get.
                let emulated =
                    req.decoded.as_ref().filter(|d| emulation::applies(&route.model, d)).map(emulation::rewrite);
                let exact = match route.provider.kind {
                    ProviderKind::Anthropic => {
                        let body = match &emulated {
                            Some(r) => upstream::count_body(route, r),
                            None => upstream::count_body_as_sent(route, req.body.clone()),
                        };
                        self.provider_count(route, &body, req.beta.as_deref(), &ctx).await
                    }
                    ProviderKind::Openai | ProviderKind::OpenaiResponses | ProviderKind::Lingma => None,
                };
                Ok(match exact {
                    Some(n) => TokenCount { input_tokens: n, exact: true },
                    None => {
                        let claude = route.provider.kind == ProviderKind::Anthropic
                            || route.model.upstream.to_ascii_lowercase().contains("claude");
                        let family = if claude { Family::Claude } else { Family::Openai };
                        let n = match emulated.as_ref().or(req.decoded.as_ref()) {
                            Some(r) => tokens::estimate(r, family),
                            None => tokens::estimate_value(&req.body, family),
                        };
                        TokenCount { input_tokens: n, exact: false }
                    }
                })
            }
        };
        ack.await;
        let total_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let (status, http_status, error_kind, error_message, response_body) = match &result {
            Ok(c) => (
                CallStatus::Ok,
                Some(200),
                None,
                None,
                Some(serde_json::json!({"input_tokens": c.input_tokens, "token_count": c.label()}).to_string()),
            ),
            Err(e) => (CallStatus::Error, Some(e.status()), Some(e.kind().to_owned()), Some(e.to_string()), None),
        };
        let request_body = (self.opts.capture_bodies)
            .then(|| {
                ctx.request_body
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).chars().take(self.opts.body_capture_limit).collect())
            })
            .flatten();
        self.sink
            .finish(CallFinish {
                id: ctx.id.clone(),
                finished_ms: now_ms(),
                status,
                http_status,
                usage: Usage::default(),
                usage_estimated: false,
                cost_micros: None,
                price_version: None,
                cost_source: None,
                ttft_ms: None,
                total_ms,
                retries: 0,
                error_kind,
                error_message,
                request_body,
                response_body,
                model_id: None,
                provider: None,
                upstream_model: None,
                notes: Vec::new(),
            })
            .await;
        result
    }

    /// The provider's count, or `None` (logged) when it cannot give one.
    async fn provider_count(
        &self,
        route: &crate::provider::Route,
        body: &serde_json::Value,
        beta: Option<&str>,
        ctx: &CallContext,
    ) -> Option<u64> {
        let key = match self.key_for(route).await {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(call = %ctx.id, provider = %route.provider.name, error = %e, "count_tokens: no usable key; estimating");
                return None;
            }
        };
        let t = self.opts.timeouts.with(&route.model.timeouts);
        let wait = Duration::from_millis(t.first_byte);
        let counted = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ProviderError::Canceled),
            r = tokio::time::timeout(wait, upstream::count_tokens(&self.http, route, body, beta, key.as_ref())) => {
                r.unwrap_or(Err(ProviderError::Timeout(wait, "waiting for the token count")))
            }
        };
        match counted {
            Ok(n) => Some(n),
            Err(e) => {
                let e = e.redacted(key.as_ref().map(BoundKey::redaction));
                tracing::warn!(call = %ctx.id, provider = %route.provider.name, error = %e, "count_tokens: the provider could not count; estimating");
                None
            }
        }
    }
}
