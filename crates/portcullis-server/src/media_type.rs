//! Media types in HTTP headers as the server reads them: a type's essence
//! (parameters and case dropped), and whether a client accepts both
//! answers a Streamable HTTP request may get, read as rmcp reads them.

use http::HeaderMap;
use http::header::ACCEPT;

/// Whether a media type's `type/subtype` (parameters dropped, case
/// ignored) is `essence`, given in lower case. Read on every request, so
/// it allocates nothing.
pub(crate) fn essence_is(media_type: &str, essence: &str) -> bool {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .eq_ignore_ascii_case(essence)
}

/// An `Accept` naming both JSON and event streams (over every `Accept`
/// value; one that is not text is skipped, as rmcp skips it; a range
/// weighted `q=0` refuses its type, as rmcp reads it).
pub(crate) fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut events = false;
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for media_type in value.split(',').filter(|range| !refused(range)) {
            json |= essence_is(media_type, "application/json");
            events |= essence_is(media_type, "text/event-stream");
        }
    }
    json && events
}

/// An `Accept` naming event streams (read as [`accepts_json_and_events`]
/// reads it), as rmcp asks of a `GET`.
pub(crate) fn accepts_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| !refused(range) && essence_is(range, "text/event-stream"))
}

/// A media range with `q=0` (in any spelling: `0`, `0.0`, `0.000`).
pub(crate) fn refused(range: &str) -> bool {
    range.split(';').skip(1).any(|param| {
        let Some((name, value)) = param.split_once('=') else {
            return false;
        };
        name.trim().eq_ignore_ascii_case("q")
            && value.trim().strip_prefix('0').is_some_and(|rest| {
                rest.is_empty() || rest.trim_start_matches(['.', '0']).is_empty()
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, http::HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn an_essence_is_read_without_parameters_case_or_spaces() {
        assert!(essence_is(
            " Application/JSON ; charset=utf-8",
            "application/json"
        ));
        assert!(essence_is("text/event-stream", "text/event-stream"));
        assert!(!essence_is("application/json-seq", "application/json"));
        assert!(!essence_is("application/jso", "application/json"));
        assert!(!essence_is("", "application/json"));
    }

    #[test]
    fn a_type_weighted_zero_is_refused() {
        assert!(accepts_json_and_events(&accept(
            "application/json, text/event-stream"
        )));
        assert!(accepts_json_and_events(&accept(
            "application/json;q=0.5, text/event-stream;q=1"
        )));
        for refusing in [
            "application/json;q=0, text/event-stream",
            "application/json, text/event-stream;q=0.0",
            "application/json;Q=0.000, text/event-stream",
        ] {
            assert!(!accepts_json_and_events(&accept(refusing)), "{refusing}");
        }
    }
}
