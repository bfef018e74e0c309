//! Credentials: an `auth` resolver asked for a bearer token per server and
//! session.
//!
//! The resolver runs before the handshake (so the bearer covers `initialize`
//! and `tools/list`, which is what an OAuth-protected server demands) and
//! again on every call. Tokens live only in memory: they are never logged,
//! stored or put in an error message. An empty token means "none": the
//! request goes out without an `Authorization` header (an OAuth client
//! before its first login, so the server's `401` says where to log in).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future of a token.
pub type TokenFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// Resolves a bearer token for `(server, session)`.
///
/// Any `Fn(String, String) -> impl Future<Output = Result<String, String>>`
/// is a resolver; the error is a reason in words (never the token).
///
/// ```
/// use portcullis_upstream::credentials::AuthResolver;
///
/// let auth = |server: String, session: String| async move {
///     Ok::<_, String>(format!("token-for-{server}-{session}"))
/// };
/// # let _ = auth.token("docs".into(), "s1".into());
/// ```
pub trait AuthResolver: Send + Sync {
    /// The token for this server in this session.
    fn token(&self, server: String, session: String) -> TokenFuture;

    /// Told when `server` answered `401` or `403`, with its
    /// `WWW-Authenticate` value if it sent one (an OAuth client starts
    /// discovery or a step-up from it). Ignored by default.
    fn challenged(&self, server: &str, status: u16, www_authenticate: Option<&str>) {
        let _ = (server, status, www_authenticate);
    }

    /// Whether a refused credential may be replaced by a good one later
    /// (an OAuth grant refreshed, stepped up or logged in anew). Then a
    /// `401` or `403` fails only the request it answered and the
    /// connection stays usable; otherwise (the default) the server is
    /// unavailable from then on.
    fn renewable(&self) -> bool {
        false
    }
}

impl<F, Fut> AuthResolver for F
where
    F: Fn(String, String) -> Fut + Send + Sync,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    fn token(&self, server: String, session: String) -> TokenFuture {
        Box::pin(self(server, session))
    }
}

/// A shared resolver.
pub type Auth = Arc<dyn AuthResolver>;
