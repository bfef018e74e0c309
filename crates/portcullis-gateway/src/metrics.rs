//! Prometheus metrics of a serving gateway, in the text exposition format
//! (version 0.0.4), written by hand: a handful of counters and one
//! histogram do not justify a metrics framework.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `portcullis_calls_total` | counter | `upstream`, `tool`, `outcome` |
//! | `portcullis_call_errors_total` | counter | `upstream`, `tool` |
//! | `portcullis_call_duration_seconds` | histogram | `upstream`, `tool` |
//! | `portcullis_tools` | gauge | `status` (`available`, `quarantined`, `withheld`) |
//! | `portcullis_tools_quarantined`, `portcullis_tools_withheld` | gauge | — |
//! | `portcullis_upstream_up` | gauge (1 or 0) | `upstream` |
//! | `portcullis_upstreams` | gauge | `state` (`up`, `down`, `needs_login`) |
//! | `portcullis_reloads_total` | counter | `result` (`applied`, `rejected`) |
//!
//! `outcome` is one of [`CallOutcome`]'s names. A call for a name the gateway
//! does not serve is counted under `tool="(unknown)"`, `upstream=""`, so a
//! client cannot grow the label set at will. Recording a call takes one
//! read lock and a few relaxed atomic additions.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use portcullis_catalog::gate::CallOutcome;

/// Upper bounds of the latency histogram, in seconds: from a fast local
/// call (half a millisecond) to a slow remote tool (half a minute).
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// The tool label of a call for a name the gateway does not serve.
pub const UNKNOWN_TOOL: &str = "(unknown)";

/// The histogram's slot of an outcome (`CallOutcome::ALL`'s order).
fn index(outcome: CallOutcome) -> usize {
    match outcome {
        CallOutcome::Ok => 0,
        CallOutcome::ToolError => 1,
        CallOutcome::Refused => 2,
        CallOutcome::Failed => 3,
        CallOutcome::Cancelled => 4,
    }
}

/// The counters of one (upstream, tool) pair.
#[derive(Default)]
struct Series {
    outcomes: [AtomicU64; 5],
    buckets: [AtomicU64; BUCKETS.len()],
    /// Total latency in microseconds (the histogram's `_sum`).
    sum_micros: AtomicU64,
}

/// What the gauges show, computed when `/metrics` is scraped (so nothing
/// needs updating when the catalogue changes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Tools served.
    pub available: usize,
    /// Tools held back because their definition drifted.
    pub quarantined: usize,
    /// Tools the exposure gate holds back.
    pub withheld: usize,
    /// Each configured upstream and whether it is connected and usable.
    pub upstreams: Vec<(String, bool)>,
    /// The upstreams that need an OAuth login (counted apart from those
    /// down: a person must act, nothing is broken).
    pub needs_login: Vec<String>,
}

impl Snapshot {
    /// Upstreams (up, down, needing a login): one that needs a login is
    /// counted there only, whatever its connection.
    pub fn upstream_counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for (name, up) in &self.upstreams {
            if self.needs_login.contains(name) {
                counts.2 += 1;
            } else if *up {
                counts.0 += 1;
            } else {
                counts.1 += 1;
            }
        }
        counts
    }
}

/// One upstream's series, by qualified tool name.
type ByTool = HashMap<Arc<str>, Arc<Series>>;

/// A series with its (upstream, tool) labels.
type Labelled = ((Arc<str>, Arc<str>), Arc<Series>);

/// The gateway's counters. Shared (behind an `Arc`) by every request.
#[derive(Default)]
pub struct Metrics {
    /// By upstream, then by qualified tool name.
    series: RwLock<HashMap<Arc<str>, ByTool>>,
    reloads_applied: AtomicU64,
    reloads_rejected: AtomicU64,
}

impl Metrics {
    /// Counts one call of `tool` (qualified name) served by `upstream`.
    pub fn record(&self, upstream: &str, tool: &str, outcome: CallOutcome, elapsed: Duration) {
        let series = self.series(upstream, tool);
        series.outcomes[index(outcome)].fetch_add(1, Ordering::Relaxed);
        let seconds = elapsed.as_secs_f64();
        // Buckets are stored non-cumulatively; the exposition sums them.
        if let Some(i) = BUCKETS.iter().position(|&bound| seconds <= bound) {
            series.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        series.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Counts one configuration reload, applied or rejected.
    pub fn record_reload(&self, applied: bool) {
        let counter = if applied {
            &self.reloads_applied
        } else {
            &self.reloads_rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn series(&self, upstream: &str, tool: &str) -> Arc<Series> {
        // Two levels so both lookups borrow (`Arc<str>: Borrow<str>`): the
        // hot path allocates nothing.
        if let Some(series) = self
            .series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(upstream)
            .and_then(|tools| tools.get(tool))
        {
            return series.clone();
        }
        let mut map = self.series.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(Arc::from(upstream))
            .or_default()
            .entry(Arc::from(tool))
            .or_default()
            .clone()
    }

    /// The exposition text for a scrape.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let mut out = String::with_capacity(4096);
        let mut rows: Vec<Labelled> = self
            .series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|(upstream, tools)| {
                tools
                    .iter()
                    .map(|(tool, series)| ((upstream.clone(), tool.clone()), series.clone()))
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));

        header(
            &mut out,
            "portcullis_calls_total",
            "counter",
            "Tool calls through the gateway, by upstream, tool and outcome.",
        );
        for ((upstream, tool), series) in &rows {
            for outcome in CallOutcome::ALL {
                let n = series.outcomes[index(outcome)].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "portcullis_calls_total{{upstream=\"{}\",tool=\"{}\",outcome=\"{}\"}} {n}",
                        escape(upstream),
                        escape(tool),
                        outcome.as_str()
                    );
                }
            }
        }
        header(
            &mut out,
            "portcullis_call_errors_total",
            "counter",
            "Tool calls that did not end with a successful result.",
        );
        for ((upstream, tool), series) in &rows {
            let errors: u64 = CallOutcome::ALL
                .iter()
                .filter(|o| o.is_error())
                .map(|o| series.outcomes[index(*o)].load(Ordering::Relaxed))
                .sum();
            let _ = writeln!(
                out,
                "portcullis_call_errors_total{{upstream=\"{}\",tool=\"{}\"}} {errors}",
                escape(upstream),
                escape(tool)
            );
        }
        header(
            &mut out,
            "portcullis_call_duration_seconds",
            "histogram",
            "Time from the call reaching the gateway to its answer leaving it.",
        );
        for ((upstream, tool), series) in &rows {
            let labels = format!(
                "upstream=\"{}\",tool=\"{}\"",
                escape(upstream),
                escape(tool)
            );
            let mut cumulative = 0;
            for (bound, bucket) in BUCKETS.iter().zip(&series.buckets) {
                cumulative += bucket.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "portcullis_call_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let count: u64 = series
                .outcomes
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum();
            let sum = series.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "portcullis_call_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "portcullis_call_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                out,
                "portcullis_call_duration_seconds_count{{{labels}}} {count}"
            );
        }

        header(
            &mut out,
            "portcullis_tools",
            "gauge",
            "Tools in the catalogue, by status.",
        );
        for (status, n) in [
            ("available", snapshot.available),
            ("quarantined", snapshot.quarantined),
            ("withheld", snapshot.withheld),
        ] {
            let _ = writeln!(out, "portcullis_tools{{status=\"{status}\"}} {n}");
        }
        header(
            &mut out,
            "portcullis_tools_quarantined",
            "gauge",
            "Tools held back because their definition changed since it was trusted.",
        );
        let _ = writeln!(out, "portcullis_tools_quarantined {}", snapshot.quarantined);
        header(
            &mut out,
            "portcullis_tools_withheld",
            "gauge",
            "Tools the exposure gate holds back (writes, allow_tools, identity).",
        );
        let _ = writeln!(out, "portcullis_tools_withheld {}", snapshot.withheld);
        header(
            &mut out,
            "portcullis_upstream_up",
            "gauge",
            "1 when the upstream is connected and usable, else 0.",
        );
        for (name, up) in &snapshot.upstreams {
            let _ = writeln!(
                out,
                "portcullis_upstream_up{{upstream=\"{}\"}} {}",
                escape(name),
                u8::from(*up)
            );
        }
        let (up, down, needs_login) = snapshot.upstream_counts();
        header(
            &mut out,
            "portcullis_upstreams",
            "gauge",
            "Configured upstreams, by state.",
        );
        let _ = writeln!(out, "portcullis_upstreams{{state=\"up\"}} {up}");
        let _ = writeln!(out, "portcullis_upstreams{{state=\"down\"}} {down}");
        let _ = writeln!(
            out,
            "portcullis_upstreams{{state=\"needs_login\"}} {needs_login}"
        );
        header(
            &mut out,
            "portcullis_reloads_total",
            "counter",
            "Configuration reloads, applied or rejected (invalid config).",
        );
        let _ = writeln!(
            out,
            "portcullis_reloads_total{{result=\"applied\"}} {}",
            self.reloads_applied.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "portcullis_reloads_total{{result=\"rejected\"}} {}",
            self.reloads_rejected.load(Ordering::Relaxed)
        );
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value: backslash, double quote and newline, as the
/// exposition format requires.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_outcome_with_a_cumulative_histogram() {
        let metrics = Metrics::default();
        metrics.record("demo", "echo", CallOutcome::Ok, Duration::from_micros(300));
        metrics.record("demo", "echo", CallOutcome::Ok, Duration::from_millis(20));
        metrics.record("demo", "echo", CallOutcome::Failed, Duration::from_secs(60));
        let text = metrics.render(&Snapshot {
            available: 3,
            quarantined: 1,
            withheld: 2,
            upstreams: vec![
                ("demo".into(), true),
                ("bro\"ken".into(), false),
                ("docs".into(), false),
            ],
            needs_login: vec!["docs".into()],
        });
        assert!(
            text.contains(
                "portcullis_calls_total{upstream=\"demo\",tool=\"echo\",outcome=\"ok\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "portcullis_calls_total{upstream=\"demo\",tool=\"echo\",outcome=\"failed\"} 1\n"
        ));
        assert!(text.contains("portcullis_call_errors_total{upstream=\"demo\",tool=\"echo\"} 1\n"));
        assert!(text.contains(
            "portcullis_call_duration_seconds_bucket{upstream=\"demo\",tool=\"echo\",le=\"0.0005\"} 1\n"
        ));
        assert!(text.contains(
            "portcullis_call_duration_seconds_bucket{upstream=\"demo\",tool=\"echo\",le=\"0.025\"} 2\n"
        ));
        // 60 s is over every finite bucket: only +Inf counts it.
        assert!(text.contains(
            "portcullis_call_duration_seconds_bucket{upstream=\"demo\",tool=\"echo\",le=\"30\"} 2\n"
        ));
        assert!(text.contains(
            "portcullis_call_duration_seconds_bucket{upstream=\"demo\",tool=\"echo\",le=\"+Inf\"} 3\n"
        ));
        assert!(text.contains("portcullis_tools_quarantined 1\n"));
        assert!(text.contains("portcullis_tools_withheld 2\n"));
        assert!(text.contains("portcullis_upstream_up{upstream=\"bro\\\"ken\"} 0\n"));
        assert!(text.contains("portcullis_upstreams{state=\"down\"} 1\n"));
        assert!(text.contains("portcullis_upstreams{state=\"needs_login\"} 1\n"));
    }

    #[test]
    fn every_sample_line_names_a_declared_metric() {
        let metrics = Metrics::default();
        metrics.record("a", "t", CallOutcome::Refused, Duration::from_millis(1));
        metrics.record_reload(false);
        let text = metrics.render(&Snapshot::default());
        let declared: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(f)))
                .unwrap_or(name);
            assert!(declared.contains(&family), "undeclared sample: {line}");
        }
        assert!(text.contains("portcullis_reloads_total{result=\"rejected\"} 1\n"));
    }
}
