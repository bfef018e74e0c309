//! A legacy (2024-11-05) HTTP+SSE MCP server on loopback, for the tests
//! and the load matrix (`examples/load_matrix.rs` includes this file): the
//! transport the gateway speaks to servers that predate Streamable HTTP.

// The load matrix uses the server but not its session count.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A legacy (2024-11-05) HTTP+SSE MCP server on loopback serving any rmcp
/// server handler: `GET /sse` opens a session (an `endpoint` event, then one
/// `message` event per server message), `POST /message?sessionId=N` carries
/// the client's messages. Stops when dropped.
pub struct LegacySse {
    addr: std::net::SocketAddr,
    /// Sessions opened so far.
    pub sessions: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl LegacySse {
    /// The URL a client opens the event stream at.
    pub fn url(&self) -> String {
        format!("http://{}/sse", self.addr)
    }
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ToServer = futures::channel::mpsc::UnboundedSender<rmcp::model::ClientJsonRpcMessage>;

#[derive(Clone)]
struct SseSessions<H> {
    handler: H,
    open: Arc<Mutex<HashMap<String, ToServer>>>,
    opened: Arc<AtomicUsize>,
}

/// Serves `handler` (cloned per session) over legacy HTTP+SSE on a free
/// loopback port.
pub async fn legacy_sse<H>(handler: H) -> LegacySse
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::response::sse::{Event, Sse};
    use axum::routing::{get, post};
    use futures::{SinkExt, StreamExt};
    use rmcp::ServiceExt;

    async fn open<H>(
        State(state): State<SseSessions<H>>,
    ) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>>
    where
        H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
    {
        let id = state.opened.fetch_add(1, Ordering::SeqCst).to_string();
        let (to_server, from_client) = futures::channel::mpsc::unbounded();
        let (to_client, from_server) = futures::channel::mpsc::unbounded();
        if let Ok(mut open) = state.open.lock() {
            open.insert(id.clone(), to_server);
        }
        let handler = state.handler.clone();
        tokio::spawn(async move {
            let sink = to_client.sink_map_err(|_| std::io::Error::other("the client left"));
            if let Ok(running) = handler.serve((sink, from_client)).await {
                let _ = running.waiting().await;
            }
        });
        let endpoint = Event::default()
            .event("endpoint")
            .data(format!("/message?sessionId={id}"));
        let messages = from_server.map(|message: rmcp::model::ServerJsonRpcMessage| {
            let data = serde_json::to_string(&message).unwrap_or_default();
            Ok(Event::default().event("message").data(data))
        });
        Sse::new(futures::stream::once(async move { Ok(endpoint) }).chain(messages))
    }

    async fn message<H>(
        State(state): State<SseSessions<H>>,
        Query(query): Query<HashMap<String, String>>,
        body: String,
    ) -> StatusCode {
        let Some(id) = query.get("sessionId") else {
            return StatusCode::BAD_REQUEST;
        };
        let Ok(message) = serde_json::from_str(&body) else {
            return StatusCode::BAD_REQUEST;
        };
        let session = state.open.lock().ok().and_then(|o| o.get(id).cloned());
        match session {
            Some(session) if session.unbounded_send(message).is_ok() => StatusCode::ACCEPTED,
            _ => StatusCode::NOT_FOUND,
        }
    }

    let state = SseSessions {
        handler,
        open: Arc::default(),
        opened: Arc::default(),
    };
    let sessions = state.opened.clone();
    let router = axum::Router::new()
        .route("/sse", get(open::<H>))
        .route("/message", post(message::<H>))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    // Nagle off, as a server that answers on a long-lived stream wants (an
    // event written while the one before is unacknowledged would wait for
    // the client's delayed ACK).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    LegacySse {
        addr,
        sessions,
        task,
    }
}
