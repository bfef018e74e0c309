//! The loopback redirect listener (RFC 8252 §7.3): a person logs in in
//! their browser and the authorization server sends the browser back to
//! `http://127.0.0.1:PORT/callback`, where this listener takes the code.
//!
//! It binds 127.0.0.1 only, answers only `GET` on its path (one small page
//! saying the login went through), reads at most 8 KiB of a request, gives
//! each connection a few seconds, and gives up after its timeout. It takes
//! only a redirect carrying the login's own `state`: another request on its
//! path (a local process, a web page open in the browser) is answered 400
//! and the login goes on waiting. What the redirect carries is checked by
//! the client afterwards too (`state`, `iss`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use url::Url;

use super::UserAgent;

/// How long a login may take by default.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// The most of a request read.
const MAX_REQUEST: usize = 8 * 1024;

/// Shows the person the authorization URL (prints it, opens a browser).
pub type Show = Arc<dyn Fn(&Url) + Send + Sync>;

/// A [`UserAgent`] for a person at this machine: shows them the
/// authorization URL and waits for their browser to come back to a
/// loopback listener.
pub struct LoopbackRedirect {
    listener: TcpListener,
    redirect_uri: String,
    path: String,
    show: Show,
    timeout: Duration,
}

impl LoopbackRedirect {
    /// Binds `127.0.0.1:port` (`0`: any free port) for the redirect to
    /// `path` (e.g. `/callback`); `show` is how the URL reaches the person.
    pub async fn bind(port: u16, path: &str, show: Show) -> std::io::Result<LoopbackRedirect> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let port = listener.local_addr()?.port();
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        Ok(LoopbackRedirect {
            listener,
            redirect_uri: format!("http://127.0.0.1:{port}{path}"),
            path,
            show,
            timeout: LOGIN_TIMEOUT,
        })
    }

    /// The redirect URI to register and send (`OAuthSettings::redirect_uri`).
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// How long to wait for the browser ([`LOGIN_TIMEOUT`] by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits for the one request on our path carrying `state` (the
    /// authorization request's, when it has one); answers the others 404,
    /// or 400 on our path, and goes on waiting: another local process or a
    /// web page the browser has open cannot end the login.
    async fn wait(&self, state: Option<&str>) -> Result<Url, String> {
        loop {
            let (stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|e| format!("the redirect listener failed: {e}"))?;
            match tokio::time::timeout(Duration::from_secs(5), self.answer(stream, state)).await {
                Ok(Some(url)) => return Ok(url),
                Ok(None) | Err(_) => continue,
            }
        }
    }

    /// Reads one request: the redirect back when it is a `GET` on our path.
    async fn answer(&self, mut stream: TcpStream, state: Option<&str>) -> Option<Url> {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 || head.len() + n > MAX_REQUEST {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        let mut parts = line.lines().next()?.split(' ');
        let (method, target) = (parts.next()?, parts.next()?);
        let url = Url::parse(&self.redirect_uri).ok()?.join(target).ok()?;
        let on_path = method == "GET" && url.path() == self.path;
        let ours = on_path
            && state.is_none_or(|s| {
                url.query_pairs()
                    .any(|(k, v)| k == "state" && v.as_ref() == s)
            });
        let (status, body) = if ours {
            (
                "200 OK",
                "Logged in: you can close this window and return to Portcullis.",
            )
        } else {
            if on_path {
                (
                    "400 Bad Request",
                    "This is not the login this listener waits for.",
                )
            } else {
                ("404 Not Found", "Not found.")
            }
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\ncache-control: no-store\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
        ours.then_some(url)
    }
}

impl UserAgent for LoopbackRedirect {
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
        _redirect_uri: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Url, String>> + Send + 'a>> {
        Box::pin(async move {
            (self.show)(url);
            let state = url
                .query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned());
            tokio::time::timeout(self.timeout, self.wait(state.as_deref()))
                .await
                .map_err(|_| format!("no login within {} s", self.timeout.as_secs()))?
        })
    }
}
