//! Human approval through real MCP sessions: rmcp's client as the person's
//! MCP client, over loopback HTTP (initialize era with a session, 2026-07-28
//! stateless) and over a byte pipe, answering the approval question in
//! every way a person (or a client) can. Each test counts how often the
//! handler ran: exactly once when approved, never otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis_catalog::policy::{Decision, PolicyRequest};
use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::approval::APPROVAL_INPUT_KEY;
use portcullis_server::{
    CallContext, HttpOptions, HttpServer, ToolError, ToolServer, serve_http, serve_io,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, Implementation,
    ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};

// Only a guard against a hung test, never an assertion about speed.
const HANG: Duration = Duration::from_secs(60);

const CARD_TOKEN: &str = "tok_live_4242424242424242abcdef";

/// How the person answers.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Approve,
    /// Accepts the form but leaves `approve` off.
    LeaveOff,
    Decline,
    Cancel,
    /// Never answers (until the request is cancelled).
    Never,
    /// Approves, but only after this long.
    Late(Duration),
}

/// The person at the client: answers every approval question the same
/// way and remembers the questions.
#[derive(Clone)]
struct Person {
    answer: Answer,
    declares_elicitation: bool,
    questions: Arc<Mutex<Vec<String>>>,
}

impl Person {
    fn new(answer: Answer) -> Self {
        Person {
            answer,
            declares_elicitation: true,
            questions: Arc::default(),
        }
    }

    fn without_elicitation() -> Self {
        Person {
            declares_elicitation: false,
            ..Person::new(Answer::Approve)
        }
    }

    fn questions(&self) -> Vec<String> {
        self.questions.lock().unwrap().clone()
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.declares_elicitation {
            capabilities.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(capabilities, Implementation::new("approval-test", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            let schema = serde_json::to_value(requested_schema).unwrap();
            assert_eq!(schema["properties"]["approve"]["type"], "boolean");
            assert_eq!(schema["properties"]["approve"]["default"], false);
            self.questions.lock().unwrap().push(message.clone());
        }
        let accept = |approve: bool| {
            ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": approve}))
        };
        Ok(match self.answer {
            Answer::Approve => accept(true),
            Answer::LeaveOff => accept(false),
            Answer::Decline => ElicitResult::new(ElicitationAction::Decline),
            Answer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            Answer::Never => {
                context.ct.cancelled().await;
                ElicitResult::new(ElicitationAction::Cancel)
            }
            Answer::Late(delay) => {
                // The scenario is a slow person: time passing is the point,
                // not a way to wait for something else.
                tokio::time::sleep(delay).await;
                accept(true)
            }
        })
    }
}

/// What the handlers saw: how many calls of `charge` ran, and whether each
/// one knew it was approved.
#[derive(Clone, Default)]
struct Runs {
    charge: Arc<AtomicUsize>,
    approved: Arc<Mutex<Vec<bool>>>,
    open: Arc<AtomicUsize>,
}

impl Runs {
    fn charges(&self) -> usize {
        self.charge.load(Ordering::SeqCst)
    }
}

/// Two tools; the policy asks before `charge` and allows `open`.
fn tools(runs: &Runs, timeout: Duration) -> ToolServer {
    let ro = |name: &str| Tool::new(name).with_annotations(ToolAnnotations::read_only(true));
    let charge = {
        let runs = runs.clone();
        move |args: Value, ctx: CallContext| {
            let runs = runs.clone();
            async move {
                runs.charge.fetch_add(1, Ordering::SeqCst);
                runs.approved.lock().unwrap().push(ctx.approved());
                Ok::<_, ToolError>(ToolResult::text(format!("charged {}", args["amount"])))
            }
        }
    };
    let open = {
        let runs = runs.clone();
        move |_: Value, _: CallContext| {
            let runs = runs.clone();
            async move {
                runs.open.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(ToolResult::text("opened"))
            }
        }
    };
    ToolServer::builder()
        .tool(
            ro("charge").with_input_schema(json!({
                "type": "object",
                "properties": {"amount": {"type": "integer"}, "card_token": {"type": "string"}},
                "required": ["amount"]
            })),
            charge,
        )
        .tool(ro("open"), open)
        .approval_timeout(timeout)
        .policy(|request: &PolicyRequest<'_>| match request.tool_name {
            "charge" => Decision::Ask { title: None },
            _ => Decision::Allow,
        })
        .build()
        .unwrap()
}

fn charge_args(amount: i64) -> serde_json::Map<String, Value> {
    json!({"amount": amount, "card_token": CARD_TOKEN})
        .as_object()
        .cloned()
        .unwrap()
}

fn charge(amount: i64) -> CallToolRequestParams {
    CallToolRequestParams::new("charge").with_arguments(charge_args(amount))
}

async fn serve(tools: ToolServer, sessions: bool) -> HttpServer {
    let options = HttpOptions {
        legacy_sessions: sessions,
        ..HttpOptions::default()
    };
    serve_http(tools, options).await.unwrap()
}

/// An initialize-era client (2025-11-25).
async fn legacy_client(server: &HttpServer, person: &Person) -> RunningService<RoleClient, Person> {
    person
        .clone()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap()
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// A stateless 2026-07-28 client.
async fn modern_client(server: &HttpServer, person: &Person) -> RunningService<RoleClient, Person> {
    person
        .clone()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url()),
            modern(),
        )
        .await
        .unwrap()
}

/// Calls through the client's own MRTR driver (a no-op for initialize-era
/// sessions, which are asked by elicitation mid-call).
async fn call(
    client: &RunningService<RoleClient, Person>,
    params: CallToolRequestParams,
) -> CallToolResult {
    tokio::time::timeout(HANG, client.call_tool(params))
        .await
        .expect("call hung")
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Asserts the denied shape (`isError`, `structuredContent.__denied`,
/// `deniedBy`, "was not approved by … Reason: …"), by whom, and the reason.
fn assert_denied(result: &CallToolResult, by: &str, reason: &str) {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let denied = result.structured_content.as_ref().expect("denied shape");
    assert_eq!(denied["__denied"], true);
    assert_eq!(denied["toolName"], "charge");
    assert_eq!(denied["deniedBy"], by);
    let message = text(result);
    assert!(
        message.starts_with(&format!(
            "The \"charge\" action was not approved by {by}. Reason: "
        )),
        "{message}"
    );
    assert!(message.contains(reason), "{message}");
    assert!(
        message.ends_with("Tell the user it was declined; do not retry it."),
        "{message}"
    );
}

/// The question names the qualified tool and shows every argument the call
/// carries, the card token included: the person approves what the upstream
/// will receive, nothing hidden from them.
fn assert_question(person: &Person) {
    let questions = person.questions();
    assert_eq!(questions.len(), 1, "{questions:?}");
    let question = &questions[0];
    assert!(question.contains("\"charge\""), "{question}");
    assert!(question.contains("amount=5"), "{question}");
    assert!(
        question.contains(&format!("card_token=\"{CARD_TOKEN}\"")),
        "{question}"
    );
}

#[tokio::test]
async fn an_initialize_era_client_approves_and_the_handler_runs_once_knowing_it() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_secs(60)), true).await;
    let person = Person::new(Answer::Approve);
    let client = legacy_client(&server, &person).await;

    let result = call(&client, charge(5)).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert!(text(&result).contains("\ncharged 5\n"), "{}", text(&result));
    assert_eq!(runs.charges(), 1);
    assert_eq!(*runs.approved.lock().unwrap(), [true]);
    assert_question(&person);

    // A tool the policy allows runs without a question.
    let opened = call(&client, CallToolRequestParams::new("open")).await;
    assert_eq!(opened.is_error, Some(false));
    assert_eq!(runs.open.load(Ordering::SeqCst), 1);
    assert_eq!(person.questions().len(), 1);

    client.cancel().await.unwrap();
    server.close().await;
}

#[tokio::test]
async fn an_initialize_era_refusal_in_any_form_never_runs_the_handler() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_secs(60)), true).await;
    for (answer, reason) in [
        (Answer::Decline, "the user declined it"),
        (Answer::Cancel, "the user dismissed the approval request"),
        (Answer::LeaveOff, "the user did not approve it"),
    ] {
        let person = Person::new(answer);
        let client = legacy_client(&server, &person).await;
        let result = call(&client, charge(5)).await;
        assert_denied(&result, "the user", reason);
        assert_question(&person);
        client.cancel().await.unwrap();
    }
    assert_eq!(runs.charges(), 0);
    server.close().await;
}

#[tokio::test]
async fn an_unanswered_question_times_out_into_a_denial() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_millis(300)), true).await;
    let person = Person::new(Answer::Never);
    let client = legacy_client(&server, &person).await;
    let result = call(&client, charge(5)).await;
    assert_denied(&result, "policy", "no answer came within 300 ms");
    assert_eq!(person.questions().len(), 1);
    assert_eq!(runs.charges(), 0);
    client.cancel().await.unwrap();
    server.close().await;
}

#[tokio::test]
async fn a_client_that_cannot_ask_is_never_asked_and_gets_a_denial() {
    let runs = Runs::default();
    // With a session, but the client did not declare elicitation.
    let server = serve(tools(&runs, Duration::from_secs(60)), true).await;
    let person = Person::without_elicitation();
    let client = legacy_client(&server, &person).await;
    let result = call(&client, charge(5)).await;
    assert_denied(&result, "policy", "the client cannot ask the user");
    assert!(person.questions().is_empty());
    client.cancel().await.unwrap();
    server.close().await;

    // Stateless HTTP: an initialize-era client's capabilities are never
    // seen and its answer would have nowhere to go.
    let server = serve(tools(&runs, Duration::from_secs(60)), false).await;
    let person = Person::new(Answer::Approve);
    let client = legacy_client(&server, &person).await;
    let result = call(&client, charge(5)).await;
    assert_denied(&result, "policy", "the client cannot ask the user");
    assert!(person.questions().is_empty());
    client.cancel().await.unwrap();
    server.close().await;

    // A 2026-07-28 client without elicitation.
    let server = serve(tools(&runs, Duration::from_secs(60)), false).await;
    let person = Person::without_elicitation();
    let client = modern_client(&server, &person).await;
    let result = call(&client, charge(5)).await;
    assert_denied(&result, "policy", "the client cannot ask the user");
    assert!(person.questions().is_empty());
    client.cancel().await.unwrap();
    server.close().await;

    assert_eq!(runs.charges(), 0);
}

#[tokio::test]
async fn a_2026_client_approves_through_the_input_required_round_trip() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_secs(60)), false).await;
    let person = Person::new(Answer::Approve);
    let client = modern_client(&server, &person).await;
    let result = call(&client, charge(5)).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert!(text(&result).contains("\ncharged 5\n"));
    assert_eq!(runs.charges(), 1);
    assert_eq!(*runs.approved.lock().unwrap(), [true]);
    assert_question(&person);
    client.cancel().await.unwrap();
    server.close().await;
}

#[tokio::test]
async fn a_2026_refusal_or_a_late_answer_never_runs_the_handler() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_millis(200)), false).await;
    for (answer, by, reason) in [
        (Answer::Decline, "the user", "the user declined it"),
        (
            Answer::Cancel,
            "the user",
            "the user dismissed the approval request",
        ),
        (Answer::LeaveOff, "the user", "the user did not approve it"),
        (
            Answer::Late(Duration::from_millis(600)),
            "policy",
            "no answer came within 200 ms",
        ),
    ] {
        let person = Person::new(answer);
        let client = modern_client(&server, &person).await;
        let result = call(&client, charge(5)).await;
        assert_denied(&result, by, reason);
        assert_question(&person);
        client.cancel().await.unwrap();
    }
    assert_eq!(runs.charges(), 0);
    server.close().await;
}

#[tokio::test]
async fn a_request_state_is_used_once_and_only_for_the_call_that_was_asked() {
    let runs = Runs::default();
    let server = serve(tools(&runs, Duration::from_secs(60)), false).await;
    let person = Person::new(Answer::Approve);
    let client = modern_client(&server, &person).await;
    let once = |params: CallToolRequestParams| async {
        tokio::time::timeout(HANG, client.peer().call_tool_once(params))
            .await
            .expect("call hung")
    };
    let approve = || {
        let mut responses = std::collections::BTreeMap::new();
        responses.insert(
            APPROVAL_INPUT_KEY.to_owned(),
            json!({"action": "accept", "content": {"approve": true}}),
        );
        responses
    };
    let retry = |args: serde_json::Map<String, Value>, state: &str| {
        let mut params = CallToolRequestParams::new("charge").with_arguments(args);
        params.input_responses = Some(approve());
        params.request_state = Some(state.to_owned());
        params
    };
    let ask = || async {
        match once(charge(5)).await.unwrap() {
            CallToolResponse::InputRequired(ask) => {
                let requests = ask.input_requests.expect("input requests");
                assert!(requests.contains_key(APPROVAL_INPUT_KEY));
                ask.request_state.expect("request state")
            }
            other => panic!("expected input_required, got {other:?}"),
        }
    };

    // Approved once: runs once.
    let state = ask().await;
    match once(retry(charge_args(5), &state)).await.unwrap() {
        CallToolResponse::Complete(result) => assert_eq!(result.is_error, Some(false)),
        other => panic!("expected a result, got {other:?}"),
    }
    assert_eq!(runs.charges(), 1);
    // The same state again: a replay, refused as a protocol error.
    let replay = once(retry(charge_args(5), &state)).await;
    assert!(replay.is_err(), "{replay:?}");
    // Approval for 5 does not carry over to 500.
    let state = ask().await;
    let swapped = once(retry(charge_args(500), &state)).await;
    assert!(swapped.is_err(), "{swapped:?}");
    // Nor does a made-up state.
    let forged = once(retry(charge_args(5), &format!("{state}-TAMPERED"))).await;
    assert!(forged.is_err(), "{forged:?}");
    assert_eq!(runs.charges(), 1);

    // A retry without the answer is asked again, not refused.
    let state = ask().await;
    let mut bare = charge(5);
    bare.request_state = Some(state);
    assert!(matches!(
        once(bare).await.unwrap(),
        CallToolResponse::InputRequired(_)
    ));
    assert_eq!(runs.charges(), 1);

    client.cancel().await.unwrap();
    server.close().await;
}

#[tokio::test]
async fn approval_works_over_a_pipe_in_both_eras() {
    for modern_era in [false, true] {
        let lifecycle = || {
            if modern_era {
                modern()
            } else {
                ClientLifecycleMode::Initialize
            }
        };
        let runs = Runs::default();
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(serve_io(
            tools(&runs, Duration::from_secs(60)),
            tokio::io::split(server_io),
        ));
        let person = Person::new(Answer::Approve);
        let client = person
            .clone()
            .serve_with_lifecycle(tokio::io::split(client_io), lifecycle())
            .await
            .unwrap();
        let result = call(&client, charge(5)).await;
        assert_eq!(result.is_error, Some(false), "{result:?}");
        assert_eq!(runs.charges(), 1);
        assert_question(&person);

        let declining = Person::new(Answer::Decline);
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let serving_too = tokio::spawn(serve_io(
            tools(&runs, Duration::from_secs(60)),
            tokio::io::split(server_io),
        ));
        let second = declining
            .clone()
            .serve_with_lifecycle(tokio::io::split(client_io), lifecycle())
            .await
            .unwrap();
        assert_denied(
            &call(&second, charge(5)).await,
            "the user",
            "the user declined it",
        );
        assert_eq!(runs.charges(), 1);

        client.cancel().await.unwrap();
        second.cancel().await.unwrap();
        serving.await.unwrap().unwrap();
        serving_too.await.unwrap().unwrap();
    }
}
