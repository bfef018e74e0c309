//! Media types in HTTP headers as the server reads them: a type's essence
//! (parameters and case dropped), and whether a client accepts both
//! answers a Streamable HTTP request may get, read as rmcp reads them.

use http::HeaderMap;
use http::header::ACCEPT;

/// `type/subtype` of a media type, lower-cased, without parameters.
pub(crate) fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// An `Accept` naming both JSON and event streams (over every `Accept`
/// value; one that is not text is skipped, as rmcp skips it).
pub(crate) fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut events = false;
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for media_type in value.split(',') {
            match essence(media_type).as_str() {
                "application/json" => json = true,
                "text/event-stream" => events = true,
                _ => {}
            }
        }
    }
    json && events
}
