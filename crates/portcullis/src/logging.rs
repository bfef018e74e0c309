//! The log on stderr: which lines are written (the filter) and how (text or
//! JSON), every line passing the redacting writer ([`redact::Stderr`],
//! [`redact::JsonLines`]).
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
//! another, or colour or hide part of one. The JSON format escapes the
//! same characters inside its strings (`\u202e`,
//! [`redact::json_visible`]): the same record when parsed.
//!
//! Operators grep these lines: their bytes are pinned by the tests below.

use std::cell::Cell;
use std::fmt::{self, Write as _};

use portcullis_catalog::redact::write_visible;
use portcullis_gateway::redact;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FormatFields, MakeWriter};

use crate::cli::LogFormat;

/// Installs the global subscriber: `default` is the filter unless
/// `RUST_LOG` is set.
pub fn init(default: &str, format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let timer = Clock;
    let _ = match format {
        LogFormat::Text => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            text(filter, ansi, redact::Stderr, timer).try_init()
        }
        LogFormat::Json => json(filter, std::io::stderr, timer).try_init(),
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
        .fmt_fields(EscapedFields)
        .with_ansi(ansi)
        .finish()
}

/// The JSON format's subscriber, writing to `writer` through
/// [`redact::JsonLines`] (redacted, invisible characters escaped).
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
        .with_writer(redact::JsonLines(writer))
        .with_env_filter(filter)
        .with_timer(timer)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .finish()
}

/// The text format's fields, as the default formatter writes them (the
/// message bare, the others `name=value`, one space between), each value
/// as its `Debug` writes it with invisible characters written out
/// ([`write_visible`]). Written straight into the line being built: no
/// string per field.
#[derive(Debug, Clone, Copy, Default)]
struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = EscapedVisitor {
            writer,
            seen: false,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one event's (or span's) fields; stops at the first failed write.
struct EscapedVisitor<'w> {
    writer: Writer<'w>,
    seen: bool,
    result: fmt::Result,
}

impl EscapedVisitor<'_> {
    /// The space before every field but the first, and `name=` unless it
    /// is the message; whether the value is to be written.
    fn begin(&mut self, field: &Field) -> bool {
        if self.result.is_err() {
            return false;
        }
        if self.seen {
            self.result = self.writer.write_char(' ');
        }
        self.seen = true;
        if self.result.is_ok() && field.name() != "message" {
            self.result = self
                .writer
                .write_str(field.name())
                .and_then(|()| self.writer.write_char('='));
        }
        self.result.is_ok()
    }
}

impl Visit for EscapedVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.begin(field) {
            self.result = write!(Visible(&mut self.writer), "{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.begin(field) {
            return;
        }
        // `Debug` quotes a string and escapes only `"`, `\` and what is
        // not printable: printable ASCII without those is written as it
        // is, between quotes, with nothing invisible in it.
        self.result = if value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            self.writer
                .write_char('"')
                .and_then(|()| self.writer.write_str(value))
                .and_then(|()| self.writer.write_char('"'))
        } else {
            write!(Visible(&mut self.writer), "{value:?}")
        };
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        // Digits only: nothing to make visible.
        if self.begin(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.begin(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.begin(field) {
            self.result = self.writer.write_str(if value { "true" } else { "false" });
        }
    }
}

/// A writer that passes text on as [`write_visible`] shows it.
struct Visible<'a, W: ?Sized>(&'a mut W);

impl<W: fmt::Write + ?Sized> fmt::Write for Visible<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_visible(self.0, text)
    }
}

/// The clock of every line: UTC, RFC 3339 with microseconds
/// (`2026-12-01T23:36:11.000042Z`), the very text of tracing-subscriber's
/// `SystemTime` timer, with the date and time of day formatted once a
/// second on each thread instead of for every line.
#[derive(Debug, Clone, Copy, Default)]
struct Clock;

/// The last second this thread formatted, and its text.
type Second = (u64, [u8; 19]);

thread_local! {
    static LAST_SECOND: Cell<Second> = const { Cell::new((u64::MAX, [0; 19])) };
}

/// 9999-12-31T23:59:59Z: past it the year has five digits, and the
/// library's own timer writes the line.
const LAST_FOUR_DIGIT_SECOND: u64 = 253_402_300_799;

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(since) if since.as_secs() <= LAST_FOUR_DIGIT_SECOND => {
                let stamp = stamp(since.as_secs(), since.subsec_micros());
                // Only ASCII digits and separators were written.
                w.write_str(std::str::from_utf8(&stamp).map_err(|_| fmt::Error)?)
            }
            // Before 1970 or after 9999: rare enough to take the slow way.
            _ => tracing_subscriber::fmt::time::SystemTime.format_time(w),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for `secs` since the epoch (at most
/// [`LAST_FOUR_DIGIT_SECOND`]) and `micros` past it.
fn stamp(secs: u64, micros: u32) -> [u8; 27] {
    let second = LAST_SECOND.with(|last| {
        let (at, text) = last.get();
        if at == secs {
            return text;
        }
        let text = date_and_time(secs);
        last.set((secs, text));
        text
    });
    let mut out = [0u8; 27];
    out[..19].copy_from_slice(&second);
    out[19] = b'.';
    digits(&mut out[20..26], u64::from(micros));
    out[26] = b'Z';
    out
}

/// `YYYY-MM-DDTHH:MM:SS` for `secs` since the epoch (UTC, proleptic
/// Gregorian; `secs` at most [`LAST_FOUR_DIGIT_SECOND`]).
fn date_and_time(secs: u64) -> [u8; 19] {
    let (year, month, day) = civil_from_days(secs / 86_400);
    let of_day = secs % 86_400;
    let mut out = *b"0000-00-00T00:00:00";
    digits(&mut out[0..4], year);
    digits(&mut out[5..7], month);
    digits(&mut out[8..10], day);
    digits(&mut out[11..13], of_day / 3600);
    digits(&mut out[14..16], of_day % 3600 / 60);
    digits(&mut out[17..19], of_day % 60);
    out
}

/// The year, month and day `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so a leap day ends its year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// `value`'s last `out.len()` decimal digits, zero-padded, into `out`.
fn digits(out: &mut [u8], mut value: u64) {
    for place in out.iter_mut().rev() {
        *place = b'0' + (value % 10) as u8;
        value /= 10;
    }
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
        tracing::info!(path = "C:\\dir \"x\"", empty = "", "quotes");
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
        // Isolates, zero-width joiner, byte-order mark, line separator and
        // DEL hidden among visible letters that are not ASCII.
        tracing::warn!(
            tool = "a\u{2067}b\u{2069}c\u{feff}d\u{200d}e\u{2028}f\u{7f}g é 日本",
            "hidden\u{202a}\u{202d}"
        );
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
                "2026-12-01T23:36:11.000042Z  INFO portcullis::logging::tests: quotes path=\"C:\\\\dir \\\"x\\\"\" empty=\"\"\n",
                "2026-12-01T23:36:11.000042Z ERROR portcullis::logging::tests: failed \"quoted \\\"x\\\"\" error=refused\\u{7} delta=-12 ratio=0.5\n",
                "2026-12-01T23:36:11.000042Z ERROR session{id=\"s\\n1\" n=7 late=\"added\\u{2066}\"}: portcullis::logging::tests: inside a span\n",
                "2026-12-01T23:36:11.000042Z  WARN portcullis::logging::tests: hidden\\u{202a}\\u{202d} tool=\"a\\u{2067}b\\u{2069}c\\u{feff}d\\u{200d}e\\u{2028}f\\u{7f}g é 日本\"\n",
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
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m quotes path=\"C:\\\\dir \\\"x\\\"\" empty=\"\"\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m failed \"quoted \\\"x\\\"\" error=refused\\u{7} delta=-12 ratio=0.5\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[1msession\u{1b}[0m\u{1b}[1m{\u{1b}[0mid=\"s\\n1\" n=7 late=\"added\\u{2066}\"\u{1b}[1m}\u{1b}[0m\u{1b}[2m:\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m inside a span\n",
                "\u{1b}[2m2026-12-01T23:36:11.000042Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mportcullis::logging::tests\u{1b}[0m\u{1b}[2m:\u{1b}[0m hidden\\u{202a}\\u{202d} tool=\"a\\u{2067}b\\u{2069}c\\u{feff}d\\u{200d}e\\u{2028}f\\u{7f}g é 日本\"\n",
            ]
        );
    }

    #[test]
    fn json_lines_are_pinned_byte_for_byte() {
        assert_eq!(
            lines(&run_json()),
            [
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"INFO\",\"message\":\"tool call\",\"upstream\":\"demo\",\"tool\":\"demo__echo\",\"decision\":\"allowed\",\"outcome\":\"ok\",\"duration_ms\":2,\"target\":\"portcullis::call\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"INFO\",\"message\":\"tool call\",\"upstream\":\"up\\nstream\",\"tool\":\"t\\u202eo\\\"ol\\u001b[31m\",\"decision\":\"denied\",\"outcome\":\"failed\",\"duration_ms\":3000,\"target\":\"portcullis::call\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"WARN\",\"message\":\"could not reach the upstream\",\"server\":\"files\",\"error\":\"boom\\r\\nforged line \\u200b\",\"attempt\":3,\"fresh\":false,\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"WARN\",\"message\":\"debug\\u0085field\",\"detail\":\"Some(\\\"x\\\\ty\\\")\",\"target\":\"rmcp::service\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"INFO\",\"message\":\"quotes\",\"path\":\"C:\\\\dir \\\"x\\\"\",\"empty\":\"\",\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"ERROR\",\"message\":\"failed \\\"quoted \\\\\\\"x\\\\\\\"\\\"\",\"error\":\"refused\\u0007\",\"delta\":-12,\"ratio\":0.5,\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"ERROR\",\"message\":\"inside a span\",\"target\":\"portcullis::logging::tests\"}\n",
                "{\"timestamp\":\"2026-12-01T23:36:11.000042Z\",\"level\":\"WARN\",\"message\":\"hidden\\u202a\\u202d\",\"tool\":\"a\\u2067b\\u2069c\\ufeffd\\u200de\\u2028f\\u007fg é 日本\",\"target\":\"portcullis::logging::tests\"}\n",
            ]
        );
        // Escaped, not changed: the record reads the same when parsed.
        let json = run_json();
        let last: serde_json::Value = serde_json::from_str(lines(&json)[7]).expect("JSON");
        assert_eq!(
            last["tool"],
            "a\u{2067}b\u{2069}c\u{feff}d\u{200d}e\u{2028}f\u{7f}g é 日本"
        );
        assert_eq!(last["message"], "hidden\u{202a}\u{202d}");
    }

    #[test]
    fn the_clock_writes_dates_as_a_calendar_walk_does() {
        // Day by day from 1970 to 2500 against a plain calendar walk.
        let (mut year, mut month, mut day) = (1970u64, 1u64, 1u64);
        let leap =
            |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        for days in 0..194_000u64 {
            assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
            let length = match month {
                2 if leap(year) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            day += 1;
            if day > length {
                day = 1;
                month += 1;
                if month > 12 {
                    month = 1;
                    year += 1;
                }
            }
        }
        let text = |secs, micros| String::from_utf8(stamp(secs, micros).to_vec()).expect("ASCII");
        assert_eq!(text(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(text(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(text(1_796_168_171, 999_999), "2026-12-01T23:36:11.999999Z");
        // The cached second is not reused for another one.
        assert_eq!(text(1_796_168_172, 42), "2026-12-01T23:36:12.000042Z");
        assert_eq!(
            text(LAST_FOUR_DIGIT_SECOND, 1),
            "9999-12-31T23:59:59.000001Z"
        );
    }

    #[test]
    fn the_clock_writes_what_the_library_timer_writes() {
        use tracing_subscriber::fmt::time::SystemTime;
        let format = |timer: &dyn FormatTime| {
            let mut text = String::new();
            timer
                .format_time(&mut Writer::new(&mut text))
                .expect("formatted");
            text
        };
        // The two read the clock apart: compare when no second began
        // between them (one of a few tries).
        for _ in 0..20 {
            let (before, ours, after) = (format(&SystemTime), format(&Clock), format(&SystemTime));
            if before[..19] == after[..19] {
                assert_eq!(ours.len(), before.len(), "{ours} {before}");
                assert_eq!(ours[..20], before[..20], "{ours} {before}");
                assert!(ours[20..26].bytes().all(|b| b.is_ascii_digit()) && ours.ends_with('Z'));
                // Same width of digits, so the text order is the time order.
                assert!(
                    before[20..] <= ours[20..] && ours[20..] <= after[20..],
                    "{before} {ours} {after}"
                );
                return;
            }
        }
        panic!("a second began between every pair of readings");
    }
}
