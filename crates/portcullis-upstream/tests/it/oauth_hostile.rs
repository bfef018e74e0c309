//! The OAuth client against hostile authorization servers and identity
//! providers on loopback, and against the files a careless operator points
//! it at: what it must not do is hang, panic, renew in a loop, or let a
//! secret it sent come back into an error.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use portcullis_upstream::oauth::{
    AssertionGrant, AssertionSource, EnterpriseIdp, IdpEndpoint, OAuthClient, OAuthError,
    OAuthSettings,
};
use serde_json::json;

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// At most the first 400 characters of `text`, for a failure's message.
fn head(text: &str) -> String {
    text.chars().take(400).collect()
}

/// Serves `router` on loopback until the test ends; its base URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// What a hostile token endpoint saw: each request's form body and
/// `Authorization` header.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<(String, Option<String>)>>,
}

impl Seen {
    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// An MCP server's protected-resource metadata and its authorization
/// server's, on one origin, offering `grants`; `token` answers at
/// `/token`. The MCP server's URL.
async fn authorization_server(
    grants: &[&str],
    token: impl Fn(String, Option<String>) -> Response + Send + Sync + 'static,
) -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let prm = json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
    let metadata = json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "grant_types_supported": grants,
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_post"],
    });
    let token = Arc::new(token);
    let recorded = seen.clone();
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/token",
            post(move |headers: HeaderMap, body: String| {
                let token = token.clone();
                let recorded = recorded.clone();
                async move {
                    let authorization = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    recorded
                        .requests
                        .lock()
                        .unwrap()
                        .push((body.clone(), authorization.clone()));
                    token(body, authorization)
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("{base}/mcp"), seen)
}

fn workload(assertion: &str) -> Option<AssertionGrant> {
    Some(AssertionGrant::Workload {
        assertion: AssertionSource::Value(assertion.into()),
    })
}

fn bearer(expires_in: serde_json::Value) -> Response {
    axum::Json(json!({
        "access_token": "at-1",
        "token_type": "Bearer",
        "expires_in": expires_in,
    }))
    .into_response()
}

/// A token endpoint that accepts the connection and never answers: the
/// grant fails within the request timeout, instead of holding the client
/// (and every request waiting on its token) forever.
#[tokio::test]
async fn oauth_a_token_endpoint_that_never_answers_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let prm = json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
    let metadata = json!({
        "issuer": base,
        "token_endpoint": format!("{base}/token"),
        "grant_types_supported": [JWT_BEARER],
    });
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { axum::Json(metadata) }),
        )
        .route("/token", post(std::future::pending::<&'static str>));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        timeout: Some(Duration::from_millis(500)),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &format!("{base}/mcp"), None, settings)
        .await
        .unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), oauth.obtain())
        .await
        .expect("the grant hung on a token endpoint that never answers");
    match outcome {
        Err(e @ OAuthError::Timeout { .. }) => {
            let said = e.to_string();
            assert!(said.contains("/token"), "{said}");
            assert!(said.contains("500 ms"), "{said}");
        }
        other => panic!("not a timeout: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The client is not left locked: its status answers at once.
    tokio::time::timeout(Duration::from_secs(1), oauth.status())
        .await
        .expect("the client stayed locked");
}

/// An identity provider whose metadata trickles out a byte at a time,
/// never ending: bounded by the same timeout.
#[tokio::test]
async fn oauth_an_identity_provider_that_trickles_forever_times_out() {
    let idp = serve(Router::new().fallback(|| async {
        let stream = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Ok::<_, std::io::Error>(bytes::Bytes::from_static(b" ")), ()))
        });
        axum::body::Body::from_stream(stream)
    }))
    .await;
    let (mcp, seen) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(3600))).await;
    let settings = OAuthSettings {
        client_id: Some("gateway".into()),
        assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
            endpoint: IdpEndpoint::Issuer(idp.clone()),
            client_id: "idp-client".into(),
            client_secret: None,
            id_token: AssertionSource::Value("eyJh.id-token.sig".into()),
        })),
        timeout: Some(Duration::from_millis(500)),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), oauth.obtain())
        .await
        .expect("the grant hung on an identity provider that never finishes");
    assert!(
        matches!(outcome, Err(OAuthError::Timeout { .. })),
        "{outcome:?}"
    );
    assert_eq!(seen.count(), 0, "the authorization server was asked");
}

/// `expires_in` at the top of its range: no overflow (a panic, or a
/// wrapped expiry in the past that renews on every request).
#[tokio::test]
async fn oauth_an_enormous_expires_in_neither_panics_nor_renews_at_once() {
    for grants in [&[JWT_BEARER][..], &["client_credentials"][..]] {
        let (mcp, seen) = authorization_server(grants, |_, _| bearer(json!(u64::MAX))).await;
        let settings = if grants[0] == JWT_BEARER {
            OAuthSettings {
                assertion_grant: workload("eyJh.workload.sig"),
                ..OAuthSettings::default()
            }
        } else {
            OAuthSettings {
                client_id: Some("machine".into()),
                client_secret: Some("machine-secret".into()),
                ..OAuthSettings::default()
            }
        };
        let oauth = OAuthClient::new("docs", &mcp, None, settings)
            .await
            .unwrap();
        let granted = tokio::spawn({
            let oauth = oauth.clone();
            async move {
                if oauth.unattended().is_some() {
                    oauth.obtain().await
                } else {
                    oauth.login(None, &oauth.follow_redirects()).await
                }
            }
        })
        .await
        .expect("the grant panicked on expires_in = u64::MAX");
        granted.expect("granted");
        let grant = oauth.grant().await.unwrap();
        assert!(!grant.expiring(), "{grant:?}");
        oauth.access_token().await.unwrap();
        oauth.access_token().await.unwrap();
        assert_eq!(seen.count(), 1, "renewed a token that does not expire");
    }
}

/// `expires_in: 0` (or below) is no time a token can be used in, so it
/// states no lifetime: the token is used until the server refuses it, not
/// renewed on every request.
#[tokio::test]
async fn oauth_a_zero_or_negative_expires_in_does_not_renew_on_every_request() {
    for (grants, expires_in) in [
        (&[JWT_BEARER][..], json!(0)),
        (&[JWT_BEARER][..], json!(-30)),
        (&["client_credentials"][..], json!(0)),
    ] {
        let (mcp, seen) =
            authorization_server(grants, move |_, _| bearer(expires_in.clone())).await;
        let settings = if grants[0] == JWT_BEARER {
            OAuthSettings {
                assertion_grant: workload("eyJh.workload.sig"),
                ..OAuthSettings::default()
            }
        } else {
            OAuthSettings {
                client_id: Some("machine".into()),
                client_secret: Some("machine-secret".into()),
                ..OAuthSettings::default()
            }
        };
        let oauth = OAuthClient::new("docs", &mcp, None, settings)
            .await
            .unwrap();
        if oauth.unattended().is_some() {
            oauth.obtain().await
        } else {
            oauth.login(None, &oauth.follow_redirects()).await
        }
        .unwrap_or_else(|e| panic!("{grants:?}: not granted: {e}"));
        for _ in 0..5 {
            oauth.access_token().await.unwrap();
        }
        assert_eq!(seen.count(), 1, "{grants:?}: renewed on every request");
        let grant = oauth.grant().await.unwrap();
        assert_eq!((grant.expires_at, grant.refresh_at), (None, None));
        // The server refusing it (a 401) still renews it.
        oauth.refresh().await.unwrap();
        assert_eq!(seen.count(), 2);
    }
}

/// An authorization server whose error echoes the request back (form body
/// and `Authorization` header, percent-encoded and raw): nothing the
/// client sent as a credential reaches the error, and a huge description
/// is cut short.
#[tokio::test]
async fn oauth_an_error_echoing_the_request_shows_no_secret_and_is_bounded() {
    let echo = |body: String, authorization: Option<String>| {
        let decoded: Vec<String> = url::form_urlencoded::parse(body.as_bytes())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let description = format!(
            "bad request {body} ({}) [{}] {}",
            decoded.join(" "),
            authorization.unwrap_or_default(),
            "x".repeat(100_000)
        );
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_request", "error_description": description})),
        )
            .into_response()
    };
    // The client's secret (sent in the form) and the workload's assertion.
    let (mcp, _) = authorization_server(&[JWT_BEARER], echo).await;
    let secret = "client s3cret/+&=";
    let settings = OAuthSettings {
        client_id: Some("gateway".into()),
        client_secret: Some(secret.into()),
        assertion_grant: workload("eyJh.workload-s3cret.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let said = oauth.obtain().await.expect_err("refused").to_string();
    assert!(said.contains("invalid_request"), "{}", head(&said));
    assert!(!said.contains("s3cret"), "{}", head(&said));
    assert!(said.len() < 2_000, "{} bytes", said.len());
    let refusal = oauth.refusal().await.unwrap();
    assert!(!refusal.contains("s3cret") && refusal.len() < 2_000);

    // The identity provider: its client secret (HTTP Basic) and the ID
    // token.
    let idp = serve(Router::new().route(
        "/token",
        post(move |headers: HeaderMap, body: String| async move {
            let authorization = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            echo(body, authorization)
        }),
    ))
    .await;
    let (mcp, seen) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(60))).await;
    let settings = OAuthSettings {
        client_id: Some("gateway".into()),
        assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
            endpoint: IdpEndpoint::TokenEndpoint(format!("{idp}/token")),
            client_id: "idp-client".into(),
            client_secret: Some("idp s3cret".into()),
            id_token: AssertionSource::Value("eyJh.id-token-s3cret.sig".into()),
        })),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let said = oauth.obtain().await.expect_err("refused").to_string();
    assert!(said.contains("invalid_request"), "{}", head(&said));
    assert!(!said.contains("s3cret"), "{}", head(&said));
    // The Basic credentials as sent, base64 and all.
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        "idp-client:idp+s3cret",
    );
    assert!(!said.contains(&basic), "{}", head(&said));
    assert!(said.len() < 2_000, "{} bytes", said.len());
    assert_eq!(seen.count(), 0);
}

/// A refresh refused with an error that echoes the refresh token.
#[tokio::test]
async fn oauth_a_refused_refresh_does_not_echo_the_refresh_token() {
    let (mcp, _) = authorization_server(&["client_credentials"], |body, _| {
        if body.contains("refresh_token=") {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({
                    "error": "invalid_request",
                    "error_description": format!("cannot read {body}"),
                })),
            )
                .into_response();
        }
        axum::Json(json!({
            "access_token": "at-1",
            "token_type": "Bearer",
            "expires_in": 1,
            "refresh_token": "rt-s3cret",
        }))
        .into_response()
    })
    .await;
    let settings = OAuthSettings {
        client_id: Some("machine".into()),
        client_secret: Some("machine-pw".into()),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    oauth
        .login(None, &oauth.follow_redirects())
        .await
        .expect("granted");
    // Expired: a failed refresh has no token left to fall back on.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let said = oauth.refresh().await.expect_err("refused").to_string();
    assert!(said.contains("invalid_request"), "{said}");
    assert!(!said.contains("s3cret"), "{said}");
    assert!(!said.contains("machine-pw"), "{said}");
}

/// An unattended grant sends no proof: a `DPoP` token answering it is not
/// a token this client can present, and is refused like one nobody asked
/// for in a person's flow.
#[tokio::test]
async fn oauth_an_unattended_grant_answered_with_a_dpop_token_is_refused() {
    let (mcp, _) = authorization_server(&[JWT_BEARER], |_, _| {
        axum::Json(json!({"access_token": "at-1", "token_type": "DPoP", "expires_in": 60}))
            .into_response()
    })
    .await;
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let refused = oauth.obtain().await;
    assert!(
        matches!(refused, Err(OAuthError::TokenType { .. })),
        "{refused:?}"
    );
    assert!(oauth.grant().await.is_none());

    // The type's case is not significant (RFC 6749 §5.1).
    let (mcp, _) = authorization_server(&[JWT_BEARER], |_, _| {
        axum::Json(json!({"access_token": "at-1", "token_type": "bEaReR"})).into_response()
    })
    .await;
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    oauth.obtain().await.expect("a Bearer token in odd case");
}

/// What an assertion file may hold: one JWS compact serialisation, its
/// three parts base64url. Anything else — a file of secrets that happens
/// to have two dots, a FIFO, a directory — is refused without being sent
/// and without its content in the error.
#[tokio::test]
async fn oauth_an_assertion_file_holding_anything_but_a_jwt_is_never_sent() {
    let (mcp, seen) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(60))).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let settings = OAuthSettings {
        assertion_grant: Some(AssertionGrant::Workload {
            assertion: AssertionSource::File(file.clone()),
        }),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    for content in [
        "eyJh.one-s3cret.sig\neyJh.two-s3cret.sig",
        "eyJh.one-s3cret.sig.eyJh.two-s3cret.sig",
        "DB_PASSWORD=s3cret;HOST=db.internal.example",
        "eyJh.pay\"load-s3cret.sig",
        "eyJh.payload-s3cret.sig\u{0}",
        "eyJh..sig-s3cret",
    ] {
        std::fs::write(&file, content).unwrap();
        let error = oauth.obtain().await.expect_err(content);
        assert!(matches!(error, OAuthError::Assertion { .. }), "{error:?}");
        let said = error.to_string();
        assert!(said.contains("does not hold a JWT"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");
    }
    // Empty, and a symlink to a file that is not a JWT.
    std::fs::write(&file, "  \n").unwrap();
    let said = oauth.obtain().await.expect_err("empty").to_string();
    assert!(said.contains("empty"), "{said}");
    let other = dir.path().join("id_rsa");
    std::fs::write(&other, "-----BEGIN KEY-----\ns3cret.s3cret.s3cret\n").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&other, &file).unwrap();
    let said = oauth.obtain().await.expect_err("a key").to_string();
    assert!(
        said.contains("does not hold a JWT") && !said.contains("s3cret"),
        "{said}"
    );
    // Too big to be a JWT.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, format!("eyJh.{}.sig", "a".repeat(100_000))).unwrap();
    let said = oauth.obtain().await.expect_err("huge").to_string();
    assert!(said.contains("larger than 65536 bytes"), "{}", head(&said));
    // A FIFO nobody writes to: refused at once, not waited on.
    std::fs::remove_file(&file).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    let error = tokio::time::timeout(Duration::from_secs(5), oauth.obtain())
        .await
        .expect("waited on a FIFO")
        .expect_err("a FIFO");
    assert!(error.to_string().contains("not a regular file"), "{error}");
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let error = oauth.obtain().await.expect_err("a directory");
    assert!(error.to_string().contains("not a regular file"), "{error}");
    assert_eq!(seen.count(), 0, "something not a JWT was sent");
}

/// A token endpoint that asks for a fresh DPoP nonce on every answer: the
/// request is made again once with the nonce it gave, never more.
#[tokio::test]
async fn oauth_a_token_endpoint_churning_dpop_nonces_is_retried_once() {
    let turn = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (mcp, seen) = authorization_server(&["client_credentials"], move |_, _| {
        let n = turn.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (
            StatusCode::BAD_REQUEST,
            [("dpop-nonce", format!("nonce-{n}"))],
            axum::Json(json!({"error": "use_dpop_nonce"})),
        )
            .into_response()
    })
    .await;
    let settings = OAuthSettings {
        client_id: Some("machine".into()),
        client_secret: Some("machine-pw".into()),
        dpop: Some(true),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let refused = oauth.login(None, &oauth.follow_redirects()).await;
    assert!(
        matches!(&refused, Err(OAuthError::Token { reason }) if reason.contains("use_dpop_nonce")),
        "{refused:?}"
    );
    assert_eq!(seen.count(), 2, "the nonce retry did not stop after one");
}

/// An MCP server that refuses every request with `use_dpop_nonce` and a
/// new nonce: each request is sent at most twice, each time with a fresh
/// proof (never one reused).
#[tokio::test]
async fn oauth_an_mcp_server_churning_dpop_nonces_gets_one_retry_per_request() {
    let proofs = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = proofs.clone();
    let base = serve(Router::new().route(
        "/mcp",
        axum::routing::any(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                if let Some(proof) = headers.get("dpop").and_then(|v| v.to_str().ok()) {
                    seen.push(proof.to_owned());
                }
                let n = seen.len();
                (
                    StatusCode::UNAUTHORIZED,
                    [
                        (
                            "www-authenticate",
                            r#"DPoP error="use_dpop_nonce""#.to_owned(),
                        ),
                        ("dpop-nonce", format!("nonce-{n}")),
                    ],
                )
                    .into_response()
            }
        }),
    ))
    .await;
    let mcp = format!("{base}/mcp");
    let oauth = OAuthClient::new("docs", &mcp, None, OAuthSettings::default())
        .await
        .unwrap();
    let key = portcullis_upstream::oauth::DpopKey::generate().unwrap();
    oauth
        .restore(portcullis_upstream::oauth::Grant {
            issuer: base.clone(),
            resource: mcp.clone(),
            token_endpoint: format!("{base}/token"),
            client: portcullis_upstream::oauth::RegisteredClient {
                issuer: base.clone(),
                client_id: "c".into(),
                client_secret: None,
                auth: portcullis_upstream::oauth::TokenAuth::None,
            },
            access_token: "bound-token".into(),
            refresh_token: None,
            expires_at: None,
            refresh_at: None,
            scopes: Vec::new(),
            client_credentials: false,
            dpop_key: Some(key),
        })
        .await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        portcullis_upstream::connect(
            vec![portcullis_upstream::McpServerConfig::streamable_http(
                "docs", &mcp,
            )],
            portcullis_upstream::ConnectOptions::default()
                .with_server_auth("docs", oauth.clone())
                .with_reconnect(portcullis_upstream::Backoff::NEVER),
        ),
    )
    .await
    .expect("the connection kept retrying");
    if let Ok(toolset) = outcome {
        assert!(toolset.tools().is_empty());
        toolset.close().await;
    }
    let proofs = proofs.lock().unwrap().clone();
    assert_eq!(proofs.len(), 2, "{} requests", proofs.len());
    let mut unique = proofs.clone();
    unique.dedup();
    assert_eq!(unique.len(), proofs.len(), "a proof was sent twice");
}

/// Whether `text` could forge a terminal line or colour one: a control
/// character (ESC, CR, LF...).
fn has_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control())
}

/// What a hostile server writes into its documents and answers reaches
/// errors (printed by `auth login`, `check`, logged): escaped (no ESC, CR
/// or LF reaches a terminal) and bounded, whichever field it came in.
#[tokio::test]
async fn oauth_server_text_in_errors_is_escaped_and_bounded() {
    let hostile = format!(
        "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nfake line {}",
        "y".repeat(50_000)
    );
    let check = |error: &OAuthError| {
        let said = error.to_string();
        assert!(!has_control(&said), "{:?}", head(&said));
        assert!(said.len() < 2_000, "{} bytes: {}", said.len(), head(&said));
    };

    // Metadata naming another issuer (the authorization server's, then
    // the identity provider's).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let prm = json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
    let evil = json!({"issuer": hostile, "token_endpoint": format!("{base}/token")});
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        )
        .fallback(get(move || async move { axum::Json(evil) }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let oauth = OAuthClient::new(
        "docs",
        &format!("{base}/mcp"),
        None,
        OAuthSettings {
            assertion_grant: workload("eyJh.workload.sig"),
            ..OAuthSettings::default()
        },
    )
    .await
    .unwrap();
    let error = oauth.obtain().await.expect_err("another issuer");
    assert!(
        matches!(error, OAuthError::IssuerMetadataMismatch { .. }),
        "{error:?}"
    );
    check(&error);

    let (mcp, _) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(60))).await;
    let oauth = OAuthClient::new(
        "docs",
        &mcp,
        None,
        OAuthSettings {
            client_id: Some("gateway".into()),
            assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
                endpoint: IdpEndpoint::Issuer(base.clone()),
                client_id: "idp-client".into(),
                client_secret: None,
                id_token: AssertionSource::Value("eyJh.id.sig".into()),
            })),
            ..OAuthSettings::default()
        },
    )
    .await
    .unwrap();
    check(&oauth.obtain().await.expect_err("another issuer"));

    // A token type, an issued token type and a refusal's code.
    for answer in [
        json!({"access_token": "t", "token_type": hostile}),
        json!({"access_token": "t", "token_type": format!("DPoP{hostile}")}),
    ] {
        let (mcp, _) = authorization_server(&[JWT_BEARER], move |_, _| {
            axum::Json(answer.clone()).into_response()
        })
        .await;
        let settings = OAuthSettings {
            assertion_grant: workload("eyJh.workload.sig"),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &mcp, None, settings)
            .await
            .unwrap();
        if let Err(error) = oauth.obtain().await {
            check(&error);
        }
    }
    let idp_hostile = hostile.clone();
    let idp = serve(Router::new().route(
        "/token",
        post(move || async move {
            axum::Json(json!({"access_token": "jag", "issued_token_type": idp_hostile}))
        }),
    ))
    .await;
    let (mcp, _) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(60))).await;
    let settings = OAuthSettings {
        client_id: Some("gateway".into()),
        assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
            endpoint: IdpEndpoint::TokenEndpoint(format!("{idp}/token")),
            client_id: "idp-client".into(),
            client_secret: None,
            id_token: AssertionSource::Value("eyJh.id.sig".into()),
        })),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    check(&oauth.obtain().await.expect_err("not an ID-JAG"));
    let code_hostile = hostile.clone();
    let (mcp, _) = authorization_server(&[JWT_BEARER], move |_, _| {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": code_hostile})),
        )
            .into_response()
    })
    .await;
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    check(&oauth.obtain().await.expect_err("refused"));

    // Protected-resource metadata for another resource, and an
    // authorization server named by an unusable URL.
    for prm in [
        json!({"resource": format!("https://elsewhere.example/{hostile}"), "authorization_servers": []}),
        json!({"resource": "RESOURCE", "authorization_servers": [format!("ftp://x/{hostile}")]}),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let prm: serde_json::Value =
            serde_json::from_str(&prm.to_string().replace("RESOURCE", &format!("{base}/mcp")))
                .unwrap();
        let router = Router::new().route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        );
        tokio::spawn(async move { axum::serve(listener, router).await });
        let settings = OAuthSettings {
            assertion_grant: workload("eyJh.workload.sig"),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &format!("{base}/mcp"), None, settings)
            .await
            .unwrap();
        check(&oauth.obtain().await.expect_err("refused"));
    }
}

/// An authorization server that denies a person's login with a
/// description holding terminal escapes: escaped and bounded too.
#[tokio::test]
async fn oauth_a_denied_login_shows_the_servers_words_escaped() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let prm = json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
    let metadata = json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "code_challenge_methods_supported": ["S256"],
    });
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/authorize",
            get(
                |axum::extract::Query(q): axum::extract::Query<
                    std::collections::HashMap<String, String>,
                >| async move {
                    let mut back = url::Url::parse(&q["redirect_uri"]).unwrap();
                    back.query_pairs_mut()
                        .append_pair("state", &q["state"])
                        .append_pair("error", "access_denied\u{1b}[31m")
                        .append_pair(
                            "error_description",
                            &format!("\u{1b}[2J\r\nforged {}", "z".repeat(5_000)),
                        );
                    axum::response::Redirect::to(back.as_str())
                },
            ),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings = OAuthSettings {
        client_id: Some("person".into()),
        redirect_uri: "http://127.0.0.1:9/callback".into(),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &format!("{base}/mcp"), None, settings)
        .await
        .unwrap();
    let error = oauth
        .login(None, &oauth.follow_redirects())
        .await
        .expect_err("denied");
    assert!(matches!(error, OAuthError::Denied { .. }), "{error:?}");
    let said = error.to_string();
    assert!(!has_control(&said), "{:?}", head(&said));
    assert!(said.len() < 2_000, "{} bytes", said.len());
}

/// An authorization server that fails (HTTP 503) when a grant falls due:
/// the token held, still valid, goes on being used, the grant is not
/// thrown away as if refused, and the server is not asked again on every
/// request.
#[tokio::test]
async fn oauth_a_failing_token_endpoint_neither_drops_a_valid_grant_nor_is_hammered() {
    for unattended in [true, false] {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failing = down.clone();
        let grants: &[&str] = if unattended {
            &[JWT_BEARER]
        } else {
            &["client_credentials"]
        };
        let (mcp, seen) = authorization_server(grants, move |_, _| {
            if failing.load(std::sync::atomic::Ordering::SeqCst) {
                return (StatusCode::SERVICE_UNAVAILABLE, "maintenance").into_response();
            }
            axum::Json(json!({
                "access_token": "at-1",
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": "rt-1",
            }))
            .into_response()
        })
        .await;
        let settings = if unattended {
            OAuthSettings {
                assertion_grant: workload("eyJh.workload.sig"),
                ..OAuthSettings::default()
            }
        } else {
            OAuthSettings {
                client_id: Some("machine".into()),
                client_secret: Some("machine-pw".into()),
                ..OAuthSettings::default()
            }
        };
        let oauth = OAuthClient::new("docs", &mcp, None, settings)
            .await
            .unwrap();
        if unattended {
            oauth.obtain().await.expect("granted");
        } else {
            oauth
                .login(None, &oauth.follow_redirects())
                .await
                .expect("granted");
        }
        // Due for renewal, not yet expired; the server goes down.
        let mut grant = oauth.grant().await.unwrap();
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
        down.store(true, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..5 {
            let token = oauth.access_token().await;
            assert_eq!(
                token.ok().as_deref(),
                Some("at-1"),
                "unattended: {unattended}"
            );
        }
        assert!(oauth.grant().await.is_some(), "unattended: {unattended}");
        assert!(
            matches!(
                oauth.status().await,
                portcullis_upstream::oauth::AuthStatus::LoggedIn { .. }
            ),
            "unattended: {unattended}"
        );
        assert_eq!(
            seen.count(),
            2,
            "unattended: {unattended}: asked on every request"
        );
        // Back up: the next renewal after the pause goes through.
        down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// While a person logs in, anything else that reaches the loopback
/// listener's callback (another local process, a web page the browser has
/// open) without the login's `state` is turned away, and the listener goes
/// on waiting for the real redirect: it cannot end the login.
#[tokio::test]
async fn oauth_a_forged_callback_does_not_end_a_login() {
    use portcullis_upstream::oauth::{LoopbackRedirect, UserAgent};
    let redirect = Arc::new(
        LoopbackRedirect::bind(0, "/callback", Arc::new(|_: &url::Url| {}))
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(10)),
    );
    let callback = redirect.redirect_uri().to_owned();
    let authorization =
        url::Url::parse("https://as.example.com/authorize?state=st-good&client_id=c").unwrap();
    let waiting = tokio::spawn({
        let redirect = redirect.clone();
        let callback = callback.clone();
        async move { redirect.authorize(&authorization, &callback).await }
    });
    let get = |url: String| async move {
        let response = reqwest::get(&url).await.expect("the listener answered");
        response.status().as_u16()
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    for forged in [
        format!("{callback}?error=access_denied&state=st-evil"),
        format!("{callback}?code=c-evil"),
    ] {
        assert_eq!(get(forged).await, 400);
    }
    assert!(!waiting.is_finished(), "a forged callback ended the login");
    assert_eq!(get(format!("{callback}?code=c-1&state=st-good")).await, 200);
    let back = waiting.await.unwrap().expect("the real redirect");
    assert!(back.as_str().contains("code=c-1"), "{back}");
}

/// An access token that cannot be sent (empty: it would go out as no
/// credential at all; a line break or a space: not a header value) is
/// refused when it is granted, with a clear reason, not left to fail every
/// request later.
#[tokio::test]
async fn oauth_an_access_token_that_cannot_be_sent_is_refused_when_granted() {
    for token in ["", "at-1\r\nX-Injected: yes", "two words", "tab\there"] {
        for grants in [&[JWT_BEARER][..], &["client_credentials"][..]] {
            let (mcp, _) = authorization_server(grants, move |_, _| {
                axum::Json(json!({"access_token": token, "token_type": "Bearer"})).into_response()
            })
            .await;
            let oauth = OAuthClient::new(
                "docs",
                &mcp,
                None,
                OAuthSettings {
                    client_id: Some("machine".into()),
                    client_secret: Some("machine-pw".into()),
                    assertion_grant: (grants[0] == JWT_BEARER)
                        .then(|| workload("eyJh.workload.sig"))
                        .flatten(),
                    ..OAuthSettings::default()
                },
            )
            .await
            .unwrap();
            let refused = if oauth.unattended().is_some() {
                oauth.obtain().await
            } else {
                oauth.login(None, &oauth.follow_redirects()).await
            };
            assert!(
                matches!(&refused, Err(OAuthError::Token { reason }) if reason.contains("no usable access token")),
                "{token:?} {grants:?}: {refused:?}"
            );
            assert!(oauth.grant().await.is_none());
        }
    }
}

/// What a grant keeps of a server's words and `auth status` prints — its
/// issuer, its scopes — holds no control character: an issuer with one
/// (which URL parsing would silently strip or encode) is refused, and a
/// granted scope that is not a scope token is left out.
#[tokio::test]
async fn oauth_a_grant_keeps_no_control_characters_from_the_server() {
    // An issuer named with an escape sequence, its metadata agreeing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let issuer = format!("{base}/\u{1b}[2J\r\nas");
    let prm = json!({"resource": format!("{base}/mcp"), "authorization_servers": [issuer]});
    let metadata = json!({
        "issuer": issuer,
        "token_endpoint": format!("{base}/token"),
        "grant_types_supported": [JWT_BEARER],
    });
    let router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { axum::Json(prm) }),
        )
        .route("/token", post(|| async { bearer(json!(60)) }))
        .fallback(get(move || async move { axum::Json(metadata) }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &format!("{base}/mcp"), None, settings)
        .await
        .unwrap();
    let refused = oauth.obtain().await;
    assert!(
        matches!(&refused, Err(OAuthError::Endpoint { .. })),
        "{refused:?}"
    );
    assert!(!has_control(&refused.unwrap_err().to_string()));

    // Granted scopes with a control character among them.
    for grants in [&[JWT_BEARER][..], &["client_credentials"][..]] {
        let (mcp, _) = authorization_server(grants, |_, _| {
            axum::Json(json!({
                "access_token": "at-1",
                "token_type": "Bearer",
                "scope": "read \u{1b}[2Jevil write\u{7}",
            }))
            .into_response()
        })
        .await;
        let oauth = OAuthClient::new(
            "docs",
            &mcp,
            None,
            OAuthSettings {
                client_id: Some("machine".into()),
                client_secret: Some("machine-pw".into()),
                assertion_grant: (grants[0] == JWT_BEARER)
                    .then(|| workload("eyJh.workload.sig"))
                    .flatten(),
                ..OAuthSettings::default()
            },
        )
        .await
        .unwrap();
        if oauth.unattended().is_some() {
            oauth.obtain().await.expect("granted");
        } else {
            oauth
                .login(None, &oauth.follow_redirects())
                .await
                .expect("granted");
        }
        let scopes = oauth.grant().await.unwrap().scopes;
        assert_eq!(scopes, ["read"], "{grants:?}");
    }
}

/// The identity provider's metadata pointing its token endpoint at the
/// cloud metadata address, and a token endpoint that redirects: the ID
/// token is sent to neither.
#[tokio::test]
async fn oauth_the_identity_providers_endpoint_is_guarded_and_never_followed() {
    let followed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = followed.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let idp = format!("http://{}", listener.local_addr().unwrap());
    let metadata = json!({"issuer": idp, "token_endpoint": "https://169.254.169.254/token"});
    let elsewhere = format!("{idp}/elsewhere");
    let router =
        Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/token",
                post(move || async move {
                    axum::response::Redirect::temporary(&elsewhere).into_response()
                }),
            )
            .route(
                "/elsewhere",
                axum::routing::any(move || {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { bearer(json!(60)) }
                }),
            );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let (mcp, seen) = authorization_server(&[JWT_BEARER], |_, _| bearer(json!(60))).await;
    let enterprise = |endpoint| OAuthSettings {
        client_id: Some("gateway".into()),
        assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
            endpoint,
            client_id: "idp-client".into(),
            client_secret: None,
            id_token: AssertionSource::Value("eyJh.id.sig".into()),
        })),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new(
        "docs",
        &mcp,
        None,
        enterprise(IdpEndpoint::Issuer(idp.clone())),
    )
    .await
    .unwrap();
    let refused = oauth.obtain().await;
    assert!(
        matches!(&refused, Err(OAuthError::Refused(m)) if m.contains("169.254.169.254")),
        "{refused:?}"
    );
    let oauth = OAuthClient::new(
        "docs",
        &mcp,
        None,
        enterprise(IdpEndpoint::TokenEndpoint(format!("{idp}/token"))),
    )
    .await
    .unwrap();
    let refused = oauth.obtain().await;
    assert!(
        matches!(&refused, Err(OAuthError::Token { reason }) if reason.contains("307")),
        "{refused:?}"
    );
    assert_eq!(followed.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(seen.count(), 0);
}

/// A token response of megabytes: refused once past the cap, not read
/// whole.
#[tokio::test]
async fn oauth_a_token_response_of_megabytes_is_cut_off() {
    let (mcp, _) = authorization_server(&[JWT_BEARER], |_, _| {
        let token = "a".repeat(3 << 20);
        axum::Json(json!({"access_token": token, "token_type": "Bearer"})).into_response()
    })
    .await;
    let settings = OAuthSettings {
        assertion_grant: workload("eyJh.workload.sig"),
        ..OAuthSettings::default()
    };
    let oauth = OAuthClient::new("docs", &mcp, None, settings)
        .await
        .unwrap();
    let refused = oauth.obtain().await;
    assert!(
        matches!(&refused, Err(OAuthError::Http(m)) if m.contains("1048576")),
        "{:?}",
        refused.as_ref().map_err(|e| head(&e.to_string()))
    );
}
