//! The front of the HTTP endpoint: the one service every request reaches
//! first. In order, it runs
//!
//! 1. the guard (`crate::guard`: Host, Origin, path, token, declared size;
//!    a CORS preflight answered, a refusal logged and answered),
//! 2. for `/mcp`: the malformed-request answers (`crate::malformed`: the
//!    body read within its limit, a body rmcp cannot read answered as a
//!    JSON-RPC error saying why),
//! 3. for `/mcp`: the MCP service (rmcp's, behind `crate::direct_call`,
//!    `crate::json_answer` and `crate::cut_off`), a session's `DELETE`
//!    answered `204 No Content`;
//!
//! and any extra route (the OAuth metadata documents, an embedder's own)
//! after the guard alone, through an axum `Router`.
//!
//! It is written by hand instead of as axum middleware layered on a
//! `Router` because every `from_fn` layer clones and boxes all the layers
//! beneath it for each request: with three of them and the route, the MCP
//! service was cloned five times a request, a sixth of the gateway's
//! instructions for a call. Here a request costs one reference count and
//! one boxed future before the MCP service's own.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{Method, StatusCode};
use tower::{Service, ServiceExt as _};

use crate::guard::{Guard, MCP_PATH};
use crate::json_answer::BoxFuture;

/// A service at `/mcp`, called through a shared reference: it clones
/// what its future needs (as each of this crate's services in front of
/// rmcp does anyway), so the front holds one and never clones it per
/// request. Such a service is always ready.
pub(crate) trait SharedService: Send + Sync + 'static {
    /// Serves one request.
    fn call_shared(&self, request: Request) -> BoxFuture;
}

/// The endpoint's front (see the module docs). Cloned per request: one
/// reference count.
#[derive(Clone)]
pub(crate) struct Front {
    shared: Arc<Shared>,
}

struct Shared {
    guard: Guard,
    /// The extra routes' paths: admitted without a token once Host and
    /// Origin passed (such a route decides about the token itself).
    open_paths: Vec<String>,
    /// The limit on a request body read at `/mcp`.
    max_body_bytes: usize,
    mcp: Box<dyn SharedService>,
    /// The extra routes, if any.
    extra: Option<Router>,
}

impl Front {
    /// The front of `mcp`, with `extra` routes (path and route) beside it.
    pub(crate) fn new(
        guard: Guard,
        max_body_bytes: usize,
        mcp: Box<dyn SharedService>,
        extra: Vec<(String, axum::routing::MethodRouter)>,
    ) -> Self {
        let open_paths: Vec<String> = extra.iter().map(|(path, _)| path.clone()).collect();
        let extra = (!extra.is_empty()).then(|| {
            extra
                .into_iter()
                .fold(Router::new(), |router, (path, route)| {
                    router.route(&path, route)
                })
        });
        Front {
            shared: Arc::new(Shared {
                guard,
                open_paths,
                max_body_bytes,
                mcp,
                extra,
            }),
        }
    }
}

impl Shared {
    async fn serve(&self, request: Request) -> Response {
        self.guard
            .pass_on(request, &self.open_paths, |request| self.admitted(request))
            .await
    }

    /// A request the guard let through: to `/mcp`, or to an extra route
    /// (the guard refuses every other path).
    async fn admitted(&self, request: Request) -> Response {
        if request.uri().path() == MCP_PATH {
            return crate::malformed::answer_malformed(request, self.max_body_bytes, |request| {
                self.mcp_endpoint(request)
            })
            .await;
        }
        match &self.extra {
            Some(router) => match router.clone().oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
            // Unreachable past the guard; answered as the guard would.
            None => crate::guard::Refusal::UnknownPath.into_response(),
        }
    }

    /// The MCP service. A session's `DELETE` is answered `204 No Content`,
    /// not rmcp's `202 Accepted`: the session is closed by then, and clients
    /// (the Python SDK among them) take only 200 or 204 as a successful
    /// termination and log a failure on every close otherwise.
    async fn mcp_endpoint(&self, request: Request) -> Response {
        let delete = request.method() == Method::DELETE;
        let mut response = match self.mcp.call_shared(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        if delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Body::empty();
        }
        response
    }
}

impl Service<Request> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { Ok(shared.serve(request).await) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http::{HeaderMap, header};

    use super::*;

    /// What reached the MCP service: each request's method and headers.
    type Seen = Arc<Mutex<Vec<(Method, HeaderMap)>>>;

    /// A front whose MCP service records what reaches it and answers
    /// `status`, with one extra route at `/extra`; bearer token `s3cret`.
    struct Recording {
        seen: Seen,
        status: StatusCode,
    }

    impl SharedService for Recording {
        fn call_shared(&self, request: Request) -> BoxFuture {
            self.seen
                .lock()
                .unwrap()
                .push((request.method().clone(), request.headers().clone()));
            let mut response = Response::new(Body::from("mcp"));
            *response.status_mut() = self.status;
            Box::pin(async move { Ok(response) })
        }
    }

    fn front(status: StatusCode) -> (Front, Seen) {
        let seen = Seen::default();
        let mcp = Box::new(Recording {
            seen: seen.clone(),
            status,
        });
        let extra = vec![(
            "/extra".to_owned(),
            axum::routing::get(|| async { "extra" }),
        )];
        let guard = Guard::new(9000, &[], &[], Some("s3cret"), 1024);
        (Front::new(guard, 1024, mcp, extra), seen)
    }

    fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost:9000");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(body.to_owned())).unwrap()
    }

    const BEARER: (&str, &str) = ("authorization", "Bearer s3cret");
    const POST_HEADERS: [(&str, &str); 3] = [
        BEARER,
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
    ];
    const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    async fn send(front: &Front, request: Request) -> (StatusCode, String) {
        let response = front.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn nothing_the_guard_or_the_body_check_refuses_reaches_the_mcp_service() {
        let (front, seen) = front(StatusCode::OK);
        let foreign_host = http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header(header::HOST, "evil.example")
            .body(Body::empty())
            .unwrap();
        let refused = [
            (foreign_host, StatusCode::FORBIDDEN),
            (request("POST", "/mcp", &[], PING), StatusCode::UNAUTHORIZED),
            (
                request("POST", "/mcp", &[("authorization", "Bearer wrong")], PING),
                StatusCode::UNAUTHORIZED,
            ),
            (
                request("POST", "/elsewhere", &POST_HEADERS, PING),
                StatusCode::NOT_FOUND,
            ),
            (
                request(
                    "POST",
                    "/mcp",
                    &[BEARER, ("content-type", "application/json")],
                    PING,
                ),
                StatusCode::NOT_ACCEPTABLE,
            ),
            (
                request("POST", "/mcp", &POST_HEADERS, &"x".repeat(2048)),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
        ];
        for (request, want) in refused {
            let what = format!("{} {}", request.method(), request.uri());
            assert_eq!(send(&front, request).await.0, want, "{what}");
        }
        assert!(seen.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_admitted_request_reaches_the_mcp_service_without_its_credential() {
        let (front, seen) = front(StatusCode::OK);
        assert_eq!(
            send(&front, request("POST", "/mcp", &POST_HEADERS, PING)).await,
            (StatusCode::OK, "mcp".to_owned())
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert!(!seen[0].1.contains_key(header::AUTHORIZATION));
    }

    #[tokio::test]
    async fn a_session_delete_accepted_is_answered_no_content() {
        let (front, _) = front(StatusCode::ACCEPTED);
        assert_eq!(
            send(&front, request("DELETE", "/mcp", &[BEARER], "")).await,
            (StatusCode::NO_CONTENT, String::new())
        );
        // Only a DELETE's 202 is rewritten.
        assert_eq!(
            send(&front, request("POST", "/mcp", &POST_HEADERS, PING))
                .await
                .0,
            StatusCode::ACCEPTED
        );
    }

    #[tokio::test]
    async fn an_extra_route_is_served_behind_the_guard_without_a_token() {
        let (front, seen) = front(StatusCode::OK);
        assert_eq!(
            send(&front, request("GET", "/extra", &[], "")).await,
            (StatusCode::OK, "extra".to_owned())
        );
        // Its other methods are the route's to refuse; Host is still checked.
        assert_eq!(
            send(&front, request("POST", "/extra", &[], "")).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        let foreign_host = http::Request::builder()
            .uri("/extra")
            .header(header::HOST, "evil.example")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&front, foreign_host).await.0, StatusCode::FORBIDDEN);
        assert!(seen.lock().unwrap().is_empty());
    }
}
