//! One TLS client configuration for every remote server's HTTP client.
//!
//! reqwest builds its rustls configuration anew for every client, and with
//! it the platform verifier, which reads and parses the system's root
//! certificates from disk each time: with one client per remote server (each
//! has its own SSRF-guarded resolver, so clients cannot be shared) that was
//! a measurable part of connecting fifty servers, and a root store held in
//! memory once per server. The configuration is built here once per process
//! instead, exactly as reqwest builds its default one (the platform's roots
//! through `rustls-platform-verifier`, TLS 1.2 and 1.3, the installed or
//! built-in aws-lc-rs crypto provider, no client certificate, SNI on,
//! ALPN `http/1.1`), and each client gets a copy that shares the verifier.
//!
//! The system roots are therefore read when the first remote server
//! connects, and a change to them is seen after a restart. A failure to
//! load them is not remembered: the next client tries again.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the TLS configuration could not be built: {0}")]
pub(crate) struct TlsSetupError(String);

/// Why a guarded HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientBuildError {
    /// The TLS configuration (the system's roots, most likely).
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// reqwest refused the builder.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// The process's configuration, once built.
static SHARED: Mutex<Option<Arc<ClientConfig>>> = Mutex::new(None);

/// The TLS configuration every guarded client is built with (a copy of the
/// process's one: the verifier and its roots are shared).
pub(crate) fn shared() -> Result<ClientConfig, TlsSetupError> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(config) = shared.as_ref() {
        return Ok(ClientConfig::clone(config));
    }
    let config = Arc::new(client_config(Vec::new())?);
    *shared = Some(config.clone());
    Ok(ClientConfig::clone(&config))
}

/// A client configuration trusting the platform's roots and `extra_roots`
/// (none outside tests), with the settings reqwest gives its own default.
pub(crate) fn client_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<ClientConfig, TlsSetupError> {
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let verifier = if extra_roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
    }
    .map_err(|e| TlsSetupError(e.to_string()))?;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| TlsSetupError(e.to_string()))?
        .dangerous()
        // The platform verifier is rustls' own WebPKI verifier over the
        // system's roots, as reqwest wires it: nothing is skipped.
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // reqwest without its `http2` feature offers HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::hosts::{GuardedResolver, HostGuard, Reach};

    /// A test root and a `localhost`/`127.0.0.1` certificate it signed (its
    /// key is a test key, used nowhere else).
    const ROOT: &[u8] = include_bytes!("../tests/fixtures/tls/root.pem");
    const LEAF: &[u8] = include_bytes!("../tests/fixtures/tls/localhost.pem");
    const LEAF_KEY: &[u8] = include_bytes!("../tests/fixtures/tls/localhost.key");

    /// Serves `ok` over HTTPS on 127.0.0.1 with the test certificate,
    /// counting the requests that got through the handshake.
    async fn https_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let certs = vec![CertificateDer::from_pem_slice(LEAF).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let count = count.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        (addr, served)
    }

    async fn resolver(url: &url::Url) -> GuardedResolver {
        GuardedResolver {
            guard: HostGuard::new(None, Reach::of(url).await),
            server: "secure".into(),
        }
    }

    /// The error and every error under it, as one line.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(e) = source {
            text.push_str(": ");
            text.push_str(&e.to_string());
            source = e.source();
        }
        text
    }

    #[tokio::test]
    async fn a_server_whose_root_is_trusted_is_reached_over_tls() {
        let (addr, served) = https_server().await;
        let url = url::Url::parse(&format!("https://{addr}/mcp")).unwrap();
        let root = CertificateDer::from_pem_slice(ROOT).unwrap();
        let tls = client_config(vec![root]).unwrap();
        let client = crate::hosts::guarded_client_with(resolver(&url).await, tls.clone()).unwrap();
        let response = client.get(url.clone()).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        assert_eq!(response.text().await.unwrap(), "ok");
        assert_eq!(served.load(Ordering::SeqCst), 1);
        // The call lane, over the same configuration.
        let lane = crate::lane::Lane::new(resolver(&url).await, tls).unwrap();
        let response = lane
            .send(http::Method::GET, &url, http::HeaderMap::new(), None)
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        assert_eq!(response.text().await.unwrap(), "ok");
        assert_eq!(served.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_certificate_the_system_does_not_trust_is_refused() {
        let (addr, served) = https_server().await;
        let url = url::Url::parse(&format!("https://{addr}/mcp")).unwrap();
        // The shared configuration every remote server's client gets.
        let client = crate::hosts::guarded_client(resolver(&url).await).unwrap();
        let error = client.get(url.clone()).send().await.unwrap_err();
        let text = chain(&error);
        assert!(
            text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
            "{text}"
        );
        // The call lane, over the same shared configuration.
        let lane = crate::lane::Lane::new(resolver(&url).await, shared().unwrap()).unwrap();
        let error = lane
            .send(http::Method::GET, &url, http::HeaderMap::new(), None)
            .await
            .unwrap_err();
        let text = chain(&error);
        assert!(
            text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
            "{text}"
        );
        assert_eq!(served.load(Ordering::SeqCst), 0, "a request got through");
    }
}
