//! What an OAuth request sent that must not come back: a server that
//! refuses a request may echo it (form body, `Authorization` header) in its
//! error description, and that description becomes an error message, a log
//! line and `auth status` output. So the credentials a request carried are
//! cut out of a refusal's body before anything reads it, in each form an
//! echo may take them (as sent, form-decoded, JSON-escaped), and a
//! server's description is shown bounded.

use base64::Engine as _;

/// Form parameters that carry a credential (RFC 6749, 7521/7523, 7636,
/// 8693).
const SECRET_PARAMS: &[&str] = &[
    "client_secret",
    "client_assertion",
    "assertion",
    "subject_token",
    "actor_token",
    "refresh_token",
    "code",
    "code_verifier",
    "password",
];

/// Shorter values are not cut out: replacing `ab` everywhere would garble
/// the message, and no credential is that short.
const MIN_SECRET: usize = 4;

/// The longest server-provided text (an error description) an error shows.
pub(crate) const MAX_SHOWN: usize = 300;

/// The credentials `headers` and the form `body` of a request carry, in
/// every form an echo may show them.
pub(crate) fn sent(headers: &http::HeaderMap, body: &[u8]) -> Vec<Vec<u8>> {
    let mut values: Vec<String> = Vec::new();
    for (name, value) in url::form_urlencoded::parse(body) {
        if SECRET_PARAMS.contains(&name.as_ref()) {
            values.push(value.into_owned());
        }
    }
    for name in [http::header::AUTHORIZATION.as_str(), "dpop"] {
        for value in headers.get_all(name).iter().filter_map(|v| v.to_str().ok()) {
            let credentials = value.split_once(' ').map_or(value, |(_, c)| c).trim();
            values.push(credentials.to_owned());
            // HTTP Basic: the pair, and the secret alone (form-decoded).
            if value
                .get(..6)
                .is_some_and(|s| s.eq_ignore_ascii_case("basic "))
                && let Ok(pair) = base64::engine::general_purpose::STANDARD.decode(credentials)
                && let Ok(pair) = String::from_utf8(pair)
                && let Some((_, secret)) = pair.split_once(':')
            {
                values.push(pair.clone());
                values.push(secret.to_owned());
                let decoded: String = url::form_urlencoded::parse(format!("s={secret}").as_bytes())
                    .map(|(_, v)| v.into_owned())
                    .collect();
                values.push(decoded);
            }
        }
    }
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for value in values.iter().filter(|v| v.len() >= MIN_SECRET) {
        let encoded: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
        let json = serde_json::to_string(value).unwrap_or_default();
        let json = json.trim_matches('"').to_owned();
        // Some encoders escape the solidus too.
        let solidus = json.replace('/', "\\/");
        for form in [value.clone(), encoded, json, solidus] {
            if form.len() >= MIN_SECRET && !forms.iter().any(|f| f == form.as_bytes()) {
                forms.push(form.into_bytes());
            }
        }
    }
    // Longest first, so a value that contains another is cut out whole.
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

/// `body` with every one of `secrets` replaced by `<redacted>`.
pub(crate) fn scrub(body: &mut Vec<u8>, secrets: &[Vec<u8>]) {
    for secret in secrets {
        if secret.is_empty() || body.len() < secret.len() {
            continue;
        }
        let mut out = Vec::with_capacity(body.len());
        let mut rest = &body[..];
        let mut changed = false;
        while let Some(at) = rest
            .windows(secret.len())
            .position(|w| w == secret.as_slice())
        {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(b"<redacted>");
            rest = &rest[at + secret.len()..];
            changed = true;
        }
        if changed {
            out.extend_from_slice(rest);
            *body = out;
        }
    }
}

/// A server's text as an error may show it: invisible characters escaped,
/// cut at [`MAX_SHOWN`] characters.
pub(crate) fn shown(text: &str) -> String {
    let visible = portcullis_catalog::redact::visible(text);
    let mut chars = visible.chars();
    let head: String = chars.by_ref().take(MAX_SHOWN).collect();
    if chars.next().is_some() {
        format!("{head}… (cut)")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_of_the_request_loses_every_credential_it_carried() {
        let mut headers = http::HeaderMap::new();
        let basic = base64::engine::general_purpose::STANDARD.encode("id:se%2Bcret");
        headers.insert(
            http::header::AUTHORIZATION,
            format!("Basic {basic}").parse().unwrap(),
        );
        let body = b"grant_type=refresh_token&refresh_token=rt+one%2F&client_id=id&scope=read";
        let sent = sent(&headers, body);
        let mut echo = format!(
            "{} | rt one/ | \"rt one\\/\" | {basic} | id:se%2Bcret | se+cret | scope=read",
            String::from_utf8_lossy(body)
        )
        .into_bytes();
        scrub(&mut echo, &sent);
        let echo = String::from_utf8(echo).unwrap();
        assert!(!echo.contains("rt"), "{echo}");
        assert!(!echo.contains("cret"), "{echo}");
        assert!(!echo.contains(&basic), "{echo}");
        // What is not a credential stays.
        assert!(echo.contains("client_id=id&scope=read"), "{echo}");
    }

    #[test]
    fn a_long_description_is_cut() {
        let long = "x".repeat(10_000);
        let shown = shown(&long);
        assert!(shown.chars().count() < MAX_SHOWN + 10, "{}", shown.len());
        assert_eq!(super::shown("short\n"), "short\\n");
    }
}
