//! Our MCP client, driven by the MCP conformance suite's client runner.
//!
//! ```sh
//! cargo run -p portcullis-upstream --example conformance_client -- URL
//! ```
//!
//! The runner starts a mock server (and, for `auth/*`, a mock authorization
//! server), appends the server's URL as the last argument, and says what to
//! do through the environment: `MCP_CONFORMANCE_SCENARIO`, and for some
//! scenarios `MCP_CONFORMANCE_CONTEXT` (JSON: pre-registered client
//! credentials and the like). This client connects through
//! `portcullis_upstream::connect`, logs in with
//! `portcullis_upstream::oauth` when the server answers 401 (the mock
//! authorization server approves at once, so its redirects are followed
//! over HTTP instead of a browser), steps up on `403 insufficient_scope`,
//! lists the tools and calls each with arguments made from its schema.
//! Scenarios of unattended grants hand over a JWT instead: a workload's
//! (`valid_jwt`: the JWT bearer grant) or an enterprise ID token
//! (`idp_id_token`: exchanged at `idp_token_endpoint` for an ID-JAG first);
//! it is written to a file the client reads, as a platform's would be.
//! Exit status 0 when every call succeeded.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use portcullis_upstream::ClientRelay;
use rmcp::model::{ClientCapabilities, ClientResult, ErrorData, ServerRequest};
use tokio_util::sync::CancellationToken;

use portcullis_upstream::oauth::{
    AssertionGrant, AssertionSource, Challenge, ClientKey, EnterpriseIdp, IdpEndpoint, OAuthClient,
    OAuthSettings,
};
use portcullis_upstream::{CallContext, CallError, ConnectOptions, McpServerConfig, connect};
use serde_json::{Map, Value, json};

/// The client ID metadata document URL the suite expects a client to use.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// Where the (never listening) browser would be sent back to; the mock
/// authorization server redirects straight there.
const REDIRECT_URI: &str = "http://127.0.0.1:45171/callback";
const SERVER: &str = "conformance";
const SESSION: &str = "conformance";
/// Logins (first and after a `401` with a token) before giving up.
const MAX_LOGINS: u32 = 3;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: conformance_client URL");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    eprintln!("scenario {scenario:?} against {url}");
    match run(&url, &context).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance client: {e}");
            ExitCode::FAILURE
        }
    }
}

fn text(context: &Value, key: &str) -> Option<String> {
    context.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// What a failed attempt asks for next.
enum Next {
    Login(Option<Challenge>),
    StepUp(Challenge),
}

/// Writes a JWT the scenario hands over to a file of `dir`, where the
/// client reads it as it would a platform's.
fn jwt_file(dir: &std::path::Path, name: &str, jwt: &str) -> Result<AssertionSource, String> {
    let path = dir.join(name);
    std::fs::write(&path, jwt).map_err(|e| e.to_string())?;
    Ok(AssertionSource::File(path))
}

/// The unattended grant the scenario's context asks for, if any.
fn assertion_grant(
    context: &Value,
    dir: &std::path::Path,
) -> Result<Option<AssertionGrant>, String> {
    if let Some(jwt) = text(context, "valid_jwt") {
        return Ok(Some(AssertionGrant::Workload {
            assertion: jwt_file(dir, "workload.jwt", &jwt)?,
        }));
    }
    let (Some(id_token), Some(client_id)) = (
        text(context, "idp_id_token"),
        text(context, "idp_client_id"),
    ) else {
        return Ok(None);
    };
    let endpoint = match (
        text(context, "idp_token_endpoint"),
        text(context, "idp_issuer"),
    ) {
        (Some(token_endpoint), _) => IdpEndpoint::TokenEndpoint(token_endpoint),
        (None, Some(issuer)) => IdpEndpoint::Issuer(issuer),
        (None, None) => return Err("the context names no identity provider".into()),
    };
    Ok(Some(AssertionGrant::Enterprise(EnterpriseIdp {
        endpoint,
        client_id,
        client_secret: text(context, "idp_client_secret"),
        id_token: jwt_file(dir, "id_token.jwt", &id_token)?,
    })))
}

async fn run(url: &str, context: &Value) -> Result<(), String> {
    let files = tempfile::tempdir().map_err(|e| e.to_string())?;
    let settings = OAuthSettings {
        client_name: "Portcullis conformance client".into(),
        redirect_uri: REDIRECT_URI.into(),
        client_id: text(context, "client_id"),
        client_secret: text(context, "client_secret"),
        issuer: text(context, "issuer"),
        client_metadata_url: Some(CLIENT_METADATA_URL.into()),
        scopes: Vec::new(),
        client_key: match text(context, "private_key_pem") {
            Some(pem) => {
                let algorithm =
                    text(context, "signing_algorithm").unwrap_or_else(|| "ES256".into());
                Some(ClientKey::from_pem(&pem, &algorithm).map_err(|e| e.to_string())?)
            }
            None => None,
        },
        // As the servers ask: the DPoP scenarios' authorization server
        // lists ES256.
        dpop: None,
        assertion_grant: assertion_grant(context, files.path())?,
        timeout: None,
    };
    let oauth = OAuthClient::new(SERVER, url, None, settings)
        .await
        .map_err(|e| e.to_string())?;
    let agent = oauth.follow_redirects();
    let mut logins = 0;
    loop {
        let next = match attempt(url, &oauth, context).await? {
            None => return Ok(()),
            Some(next) => next,
        };
        match next {
            Next::StepUp(challenge) => {
                eprintln!("step-up for scopes {:?}", challenge.scopes);
                oauth
                    .step_up(&challenge, &agent)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Next::Login(challenge) => {
                // A token that was refused: refresh first, else log in again
                // (the server may have moved to another authorization
                // server: discovery runs again).
                if oauth.grant().await.is_some() && oauth.refresh().await.is_ok() {
                    continue;
                }
                logins += 1;
                if logins > MAX_LOGINS {
                    return Err(format!("still refused after {MAX_LOGINS} logins"));
                }
                oauth
                    .login(challenge.as_ref(), &agent)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
}

/// What a `401`/`403` the OAuth client was told of asks for.
fn next_from(oauth: &OAuthClient) -> Option<Next> {
    match oauth.take_challenge() {
        Some((403, challenge)) if challenge.insufficient_scope() => Some(Next::StepUp(challenge)),
        Some((401, challenge)) => Some(Next::Login(Some(challenge))),
        _ => None,
    }
}

/// One connection: list, call every tool. `Ok(None)` when all went well;
/// `Ok(Some(next))` when authorization stands in the way.
async fn attempt(url: &str, oauth: &OAuthClient, scenario: &Value) -> Result<Option<Next>, String> {
    let options = ConnectOptions::default()
        .with_auth(oauth.clone())
        .with_session(SESSION)
        .with_timeout(Duration::from_secs(20));
    let toolset = connect(vec![McpServerConfig::streamable_http(SERVER, url)], options)
        .await
        .map_err(|e| e.to_string())?;
    let outcome = calls(&toolset, oauth, scenario).await;
    toolset.close().await;
    outcome
}

async fn calls(
    toolset: &portcullis_upstream::Toolset,
    oauth: &OAuthClient,
    scenario: &Value,
) -> Result<Option<Next>, String> {
    let failed: Vec<String> = toolset
        .diagnostics()
        .iter()
        .map(ToString::to_string)
        .collect();
    if let Some(next) = next_from(oauth) {
        return Ok(Some(next));
    }
    if !failed.is_empty() && toolset.tools().is_empty() {
        return Err(failed.join("; "));
    }
    let context = CallContext::for_session(SESSION).with_relay(Arc::new(Answerer));
    // The calls the scenario asks for (`toolCalls` in its context), else
    // every tool with arguments from its schema.
    let planned: Vec<(String, Value)> = match scenario.get("toolCalls").and_then(Value::as_array) {
        Some(calls) => calls
            .iter()
            .filter_map(|c| {
                let name = c.get("name")?.as_str()?.to_owned();
                let mut args = c.get("arguments").cloned().unwrap_or(json!({}));
                // A null argument means "not given": the gate validates
                // arguments against the tool's schema before sending, and
                // null is not a value of the types these schemas name.
                if let Some(map) = args.as_object_mut() {
                    map.retain(|_, v| !v.is_null());
                }
                Some((name, args))
            })
            .collect(),
        None => {
            let tools = toolset.tools();
            // The schema-preservation scenario: hand the rich schema back,
            // as this client holds it, to the echo tool.
            let echo = tools.iter().find(|t| t.name == "json_schema_echo");
            let focal = tools.iter().find(|t| t.name == "json_schema_2020_12_tool");
            match (echo, focal) {
                (Some(echo), Some(focal)) => vec![(
                    echo.name.clone(),
                    json!({"schema": focal.input_schema.clone().map_or(json!({}), Value::from)}),
                )],
                _ => tools
                    .into_iter()
                    .map(|t| {
                        let args = arguments(t.input_schema.as_deref());
                        (t.name, args)
                    })
                    .collect(),
            }
        }
    };
    for (name, args) in planned {
        eprintln!("calling {name} with {args}");
        match toolset.call(&name, Some(args), &context).await {
            Ok(result) => eprintln!("{name}: {result:?}"),
            Err(CallError::Unauthorized { .. } | CallError::Forbidden { .. }) => {
                return next_from(oauth)
                    .map(Some)
                    .ok_or_else(|| format!("{name}: refused without a challenge"));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(None)
}

/// Arguments for a tool from its input schema: each required property
/// gets a value of its type.
fn arguments(schema: Option<&Value>) -> Value {
    let mut args = Map::new();
    let Some(schema) = schema else {
        return Value::Object(args);
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = properties {
        for (name, property) in properties {
            if !required.contains(&name.as_str()) {
                continue;
            }
            let value = match property.get("type").and_then(Value::as_str) {
                Some("number") | Some("integer") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            };
            args.insert(name.clone(), value);
        }
    }
    Value::Object(args)
}

/// Answers the server's elicitation requests as a person who accepts:
/// each field of the requested schema gets its default, else a value of
/// its type.
struct Answerer;

impl ClientRelay for Answerer {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({"elicitation": {}})).unwrap_or_default()
    }

    fn request(
        &self,
        request: ServerRequest,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ClientResult, ErrorData>> {
        Box::pin(async move {
            let ServerRequest::ElicitRequest(elicit) = request else {
                return Err(ErrorData::invalid_request(
                    "only elicitation is answered",
                    None,
                ));
            };
            let params = serde_json::to_value(&elicit.params).unwrap_or(Value::Null);
            let mut content = Map::new();
            if let Some(properties) = params
                .pointer("/requestedSchema/properties")
                .and_then(Value::as_object)
            {
                for (name, property) in properties {
                    let value = property
                        .get("default")
                        .cloned()
                        .unwrap_or_else(|| match property.get("type").and_then(Value::as_str) {
                            Some("boolean") => json!(true),
                            Some("number") | Some("integer") => json!(1),
                            _ => json!("test"),
                        });
                    content.insert(name.clone(), value);
                }
            }
            serde_json::from_value(json!({"action": "accept", "content": content}))
                .map(ClientResult::ElicitResult)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))
        })
    }
}
