//! Credentials: an `auth` resolver asked for a bearer token per server and
//! session.
//!
//! The resolver runs before the handshake (so the bearer covers `initialize`
//! and `tools/list`, which is what an OAuth-protected server demands) and
//! again on every call. Tokens live only in memory: they are never logged,
//! stored or put in an error message. An empty token means "none": the
//! request goes out without an `Authorization` header (an OAuth client
//! before its first login, so the server's `401` says where to log in). A
//! token is sent as Bearer unless the resolver presents it otherwise per
//! request ([`AuthResolver::present`]: a DPoP-bound token with its proof).

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

    /// How one request (`method` on `url`) presents `token`. Bearer by
    /// default; an OAuth client holding a DPoP-bound grant answers with the
    /// `DPoP` scheme and a fresh proof for this very request.
    fn present(&self, token: &str, method: &str, url: &url::Url) -> Result<Presentation, String> {
        let _ = (method, url);
        Ok(Presentation::bearer(token))
    }

    /// Told of every response `server` sent to a request that carried a
    /// credential (to keep a `DPoP-Nonce`). `true` asks for that request to
    /// be sent once more, freshly presented: a `401` that asks for the
    /// nonce it carries. Nothing and `false` by default.
    fn answered(&self, server: &str, status: u16, headers: &http::HeaderMap) -> bool {
        let _ = (server, status, headers);
        false
    }
}

/// How a request presents its token: the `Authorization` value and, for a
/// DPoP-bound token, the `DPoP` proof. Its `Debug` shows neither.
#[derive(Clone)]
pub struct Presentation {
    /// The `Authorization` header's value (`Bearer …` or `DPoP …`).
    pub authorization: String,
    /// The `DPoP` header's value, for a DPoP-bound token.
    pub dpop: Option<String>,
}

impl Presentation {
    /// `token` as a Bearer token.
    pub fn bearer(token: &str) -> Presentation {
        Presentation {
            authorization: format!("Bearer {token}"),
            dpop: None,
        }
    }
}

impl std::fmt::Debug for Presentation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = self.authorization.split(' ').next().unwrap_or_default();
        f.debug_struct("Presentation")
            .field("scheme", &scheme)
            .field("proof", &self.dpop.is_some())
            .finish()
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
