//! Errors of a gateway call, with where they came from and whether another attempt may help.

use std::time::Duration;

use crate::model::{ErrorInfo, ErrorKind};
use secrecy::SecretString;

use crate::secrets::{SecretError, redact};

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("unknown model `{0}`")]
    UnknownModel(String),
    #[error("provider `{provider}` has no usable key: {source}")]
    Key { provider: String, source: SecretError },
    /// The request provably never reached the provider (connection refused, DNS, TLS handshake):
    /// safe to retry and to hand to another model.
    #[error("could not reach the provider: {0}")]
    Connect(String),
    /// The request was written to the provider (or a 2xx head arrived) and then the transport
    /// failed: the provider may have processed, and billed, it. Never retried, never falls back.
    #[error("the request reached the provider, but the answer was lost: {0}")]
    Sent(String),
    #[error("the provider did not answer within {0:?} ({1})")]
    Timeout(Duration, &'static str),
    /// The provider answered with an error status.
    #[error("provider error {status}: {}", info.message)]
    Upstream { status: u16, info: ErrorInfo, retry_after: Option<Duration> },
    /// The provider answered with a redirect. Keyhaven follows none: the request carries the key
    /// (and the body), and a redirect could take them to another origin.
    #[error(
        "the provider answered {status} with a redirect to {location}; Keyhaven follows no redirects from a provider \
         (check its base URL)"
    )]
    Redirect { status: u16, location: String },
    #[error("the provider sent a malformed stream: {0}")]
    Malformed(String),
    #[error("the provider closed the stream before it finished")]
    Disconnected,
    #[error("the call was canceled")]
    Canceled,
    /// A single-request upstream (Lingma) is serving another call; not retried.
    #[error("{0}")]
    Busy(String),
    /// Keyhaven could not prepare the call locally (e.g. a temp file); not retried.
    #[error("{0}")]
    Local(String),
    /// A `refuse` budget is spent: new calls are refused until its period resets.
    #[error(
        "Keyhaven budget `{budget}` is used up (limit ${limit_usd:.2} per {period}); new calls are refused until it \
         resets at {reset_at}. Raise the limit or change the budget on the dashboard (Budgets)"
    )]
    BudgetExceeded { budget: String, limit_usd: f64, period: &'static str, reset_ms: i64, reset_at: String },
}

impl ProviderError {
    /// A low-cardinality label for records and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::UnknownModel(_) => "unknown_model",
            ProviderError::Key { .. } => "key",
            ProviderError::Connect(_) => "connect",
            ProviderError::Sent(_) => "answer_lost",
            ProviderError::Timeout(..) => "timeout",
            ProviderError::Upstream { info, .. } => info.kind.as_str(),
            ProviderError::Redirect { .. } => "upstream_redirect",
            ProviderError::Malformed(_) => "malformed_upstream",
            ProviderError::Disconnected => "upstream_disconnected",
            ProviderError::Canceled => "canceled",
            ProviderError::Busy(_) => "busy",
            ProviderError::Local(_) => "local",
            ProviderError::BudgetExceeded { .. } => "budget_exceeded",
        }
    }

    /// The error as the client sees it (in any dialect).
    pub fn info(&self) -> ErrorInfo {
        let kind = match self {
            ProviderError::UnknownModel(_) => ErrorKind::NotFound,
            ProviderError::Key { .. } => ErrorKind::Authentication,
            ProviderError::Connect(_)
            | ProviderError::Sent(_)
            | ProviderError::Malformed(_)
            | ProviderError::Disconnected
            | ProviderError::Redirect { .. } => ErrorKind::Upstream,
            ProviderError::Timeout(..) => ErrorKind::Timeout,
            ProviderError::Upstream { info, .. } => info.kind,
            ProviderError::Canceled | ProviderError::Local(_) => ErrorKind::Internal,
            ProviderError::Busy(_) | ProviderError::BudgetExceeded { .. } => ErrorKind::RateLimited,
        };
        let message = match self {
            ProviderError::Upstream { info, .. } => info.message.clone(),
            other => other.to_string(),
        };
        ErrorInfo { kind, message }
    }

    /// The HTTP status to answer with before any byte was sent.
    pub fn status(&self) -> u16 {
        match self {
            ProviderError::UnknownModel(_) => 404,
            ProviderError::Key { .. } => 401,
            ProviderError::Connect(_)
            | ProviderError::Sent(_)
            | ProviderError::Malformed(_)
            | ProviderError::Disconnected
            | ProviderError::Redirect { .. } => 502,
            ProviderError::Timeout(..) => 504,
            ProviderError::Upstream { status, .. } => *status,
            ProviderError::Canceled => 499,
            ProviderError::Busy(_) | ProviderError::BudgetExceeded { .. } => 429,
            ProviderError::Local(_) => 500,
        }
    }

    /// Removes `secret` from any text the upstream sent back (some echo the key in errors).
    pub fn redacted(self, secret: Option<&SecretString>) -> ProviderError {
        match (self, secret) {
            (ProviderError::Upstream { status, mut info, retry_after }, Some(s)) => {
                info.message = redact(&info.message, &[s]);
                ProviderError::Upstream { status, info, retry_after }
            }
            (ProviderError::Malformed(m), Some(s)) => ProviderError::Malformed(redact(&m, &[s])),
            (ProviderError::Redirect { status, location }, Some(s)) => {
                ProviderError::Redirect { status, location: redact(&location, &[s]) }
            }
            (other, _) => other,
        }
    }

    /// Whether the error proves the provider did not process the request, so another attempt
    /// (or another model of a group) cannot bill twice: a failed connection, or an error status
    /// that says so (429, 500, 502, 503, 504, 529). A timeout after sending, a lost answer
    /// ([`ProviderError::Sent`]) and anything after the first byte never qualify.
    pub fn not_processed(&self) -> bool {
        match self {
            ProviderError::Connect(_) => true,
            ProviderError::Upstream { status, .. } => crate::provider::retry::retryable_status(*status),
            _ => false,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Upstream { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
