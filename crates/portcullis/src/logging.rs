//! The log on stderr: which lines are written (the filter) and how (text or
//! JSON), every line passing the redacting writer ([`redact::Stderr`]).
//!
//! Logs go to stderr, always (stdout carries results, or MCP over
//! `--stdio`). `RUST_LOG` overrides the default level. `--log-format json`
//! writes one JSON object a line with the event's fields flattened beside
//! `message` (`upstream`, `tool`, `duration_ms`, `outcome` on a call), for
//! collectors that index fields. Nothing logged anywhere carries argument
//! values or secrets: call lines name the tool, never its arguments, and
//! every line, whichever library wrote it, passes [`redact::Stderr`], which
//! replaces the config's secrets and masks URL credentials.
//!
//! In the text format each field's value (the message too) has its
//! control, bidirectional and zero-width characters written out
//! ([`portcullis_catalog::redact::visible`]): an upstream's error text, a
//! tool name or a server's log message cannot end the line and forge
//! another, or colour or hide part of one. (JSON escapes them itself.)
//!
//! Operators grep these lines: their bytes are pinned by the tests below.

use portcullis_gateway::redact;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::time::FormatTime;

use crate::cli::LogFormat;

/// Installs the global subscriber: `default` is the filter unless
/// `RUST_LOG` is set.
pub fn init(default: &str, format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let timer = tracing_subscriber::fmt::time::SystemTime;
    let _ = match format {
        LogFormat::Text => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            text(filter, ansi, redact::Stderr, timer).try_init()
        }
        LogFormat::Json => json(filter, redact::Stderr, timer).try_init(),
    };
}

/// The text format's subscriber.
fn text<W, T>(
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    writer: W,
    timer: T,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    T: FormatTime + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter)
        .with_timer(timer)
        .fmt_fields(escaped_fields())
        .with_ansi(ansi)
        .finish()
}

/// The JSON format's subscriber.
fn json<W, T>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    timer: T,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    T: FormatTime + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter)
        .with_timer(timer)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .finish()
}

/// The text format's fields, as the default formatter writes them (the
/// message bare, others `name=value`), with invisible characters written
/// out.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use portcullis_catalog::redact::visible;
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let shown = format!("{value:?}");
        let shown = visible(&shown);
        if field.name() == "message" {
            write!(writer, "{shown}")
        } else {
            write!(writer, "{}={shown}", field.name())
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use portcullis_catalog::gate::{CallDecision, CallOutcome, CallReport};

    /// A fixed clock, so whole lines can be compared.
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            w.write_str("2026-12-01T23:36:11.000042Z")
        }
    }

    /// Everything written, in memory.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }

    impl Capture {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("capture").clone()).expect("UTF-8")
        }
    }

    fn report() -> CallReport {
        CallReport {
            decision: CallDecision::Allowed,
            outcome: CallOutcome::Ok,
            code: None,
        }
    }

    /// The events every format is pinned on: the call line (plain and with
    /// hostile names), and the kinds of field other lines use.
    fn events() {
        portcullis_gateway::audit::log_call(
            "demo",
            "demo__echo",
            &report(),
            Duration::from_micros(2_750),
        );
        portcullis_gateway::audit::log_call(
            "up\nstream",
            "t\u{202e}o\"ol\u{1b}[31m",
            &CallReport {
                decision: CallDecision::Denied,
                outcome: CallOutcome::Failed,
                code: Some("ERR_TIMEOUT".into()),
            },
            Duration::from_secs(3),
        );
        let error = std::io::Error::other("boom\r\nforged line \u{200b}");
        tracing::warn!(server = "files", %error, attempt = 3_i64, fresh = false, "could not {} the upstream", "reach");
        tracing::warn!(target: "rmcp::service", detail = ?Some("x\ty"), "debug\u{85}field");
        let source = std::io::Error::other("refused\u{7}");
        tracing::error!(
            error = &source as &(dyn std::error::Error + 'static),
            delta = -12_i64,
            ratio = 0.5_f64,
            "failed {:?}",
            "quoted \"x\""
        );
        let span = tracing::info_span!(
            "session",
            id = "s\n1",
            n = 7_u64,
            late = tracing::field::Empty
        );
        span.record("late", "added\u{2066}");
        span.in_scope(|| tracing::error!("inside a span"));
        tracing::debug!("filtered out");
    }

    fn run_text(ansi: bool) -> String {
        let capture = Capture::default();
        let filter = tracing_subscriber::EnvFilter::new("info");
        tracing::subscriber::with_default(text(filter, ansi, capture.clone(), Fixed), events);
        capture.text()
    }

    fn run_json() -> String {
        let capture = Capture::default();
        let filter = tracing_subscriber::EnvFilter::new("info");
        tracing::subscriber::with_default(json(filter, capture.clone(), Fixed), events);
        capture.text()
    }

    fn lines(text: &str) -> Vec<&str> {
        text.split_inclusive('\n').collect()
    }

    #[test]
    fn text_lines_are_pinned_byte_for_byte() {
        assert_eq!(
            lines(&run_text(false)),
            [
                "2026-12-01T23:36:11.000042Z  INFO portcullis::call: tool call upstream=\"demo\" tool=\"demo__echo\" decision=\"allowed\" outcome=\"ok\" duration_ms=2\n",
                "2026-12-01T23:36:11.000042Z  INFO portcullis::call: tool call upstream=\"up\\nstream\" tool=\"t\\u{202e}o\\\"ol\\u{1b}[31m\" decision=\"denied\" outcome=\"failed\" duration_ms=3000\n",
                "2026-12-01T23:36:11.000042Z  WARN portcullis::logging::tests: could not reach the upstream server=\"files\" error=boom\\r\\nforged line \\u{200b} attempt=3 fresh=false\n",
                "2026-12-01T23:36:11.000042Z  WARN rmcp::service: debug\\u{85}field detail=Some(\"x\\ty\")\n",
                "2026-12-01T23:36:11.000042Z ERROR portcullis::logging::tests: failed \"quoted \\\"x\\\"\" error=refused\\u{7} delta=-12 ratio=0.5\n",
                "2026-12-01T23:36:11.000042Z ERROR session{id=\"s\\n1\" n=7 late=\"added\\u{2066}\"}: portcullis::logging::tests: inside a span\n",
            ]
        );
    }

    #[test]
    fn ansi_text_lines_are_pinned_byte_for_byte() {
        assert_eq!(
            lines(&run_text(true)),
            [
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mportcullis::call\u{1b}[0m\u{1b}[2m:\u{1b}[0m tool call upstream=\"demo\" tool=\"demo__echo\" decision=\"allowed\" outcome=\"ok\" duration_ms=2\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mportcullis::call\u{1b}[0m\u{1b}[2m:\u{1b}[0m tool call upstream=\"up\\nstream\" tool=\"t\\u{202e}o\\\"ol\\u{1b}[31m\" decision=\"denied\" outcome=\"failed\" duration_ms=3000\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m could not reach the upstream server=\"files\" error=boom\\r\\nforged line \\u{200b} attempt=3 fresh=false\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mrmcp::service\u{1b}[0m\u{1b}[2m:\u{1b}[0m debug\\u{85}field detail=Some(\"x\\ty\")\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m failed \"quoted \\\"x\\\"\" error=refused\\u{7} delta=-12 ratio=0.5\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[1msession\u{1b}[0m\u{1b}[1m{\u{1b}[0mid=\"s\\n1\" n=7 late=\"added\\u{2066}\"\u{1b}[1m}\u{1b}[0m\u{1b}[2m:\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m inside a span\n",
            ]
        );
    }

    #[test]
    fn json_lines_are_pinned_byte_for_byte() {
        assert_eq!(
            lines(&run_json()),
            [
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"INFO\",\"message\":\"tool call\",\"upstream\":\"demo\",\"tool\":\"demo__echo\",\"decision\":\"allowed\",\"outcome\":\"ok\",\"duration_ms\":2,\"target\":\"portcullis::call\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"INFO\",\"message\":\"tool call\",\"upstream\":\"up\\nstream\",\"tool\":\"t\u{202e}o\\\"ol\\u001b[31m\",\"decision\":\"denied\",\"outcome\":\"failed\",\"duration_ms\":3000,\"target\":\"portcullis::call\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"WARN\",\"message\":\"could not reach the upstream\",\"server\":\"files\",\"error\":\"boom\\r\\nforged line \u{200b}\",\"attempt\":3,\"fresh\":false,\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"WARN\",\"message\":\"debug\u{85}field\",\"detail\":\"Some(\\\"x\\\\ty\\\")\",\"target\":\"rmcp::service\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"ERROR\",\"message\":\"failed \\\"quoted \\\\\\\"x\\\\\\\"\\\"\",\"error\":\"refused\\u0007\",\"delta\":-12,\"ratio\":0.5,\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"ERROR\",\"message\":\"inside a span\",\"target\":\"portcullis::logging::tests\"}\n",
            ]
        );
    }
}
