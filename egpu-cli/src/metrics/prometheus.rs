//! The metrics in Prometheus's formats, by `prometheus-client`: a [`Collector`] that, on each
//! scrape, encodes egpu's health and then the built-in metrics of the processes seen, in the text
//! format 0.0.4 or, when the scraper asks for it, OpenMetrics 1.0 (which ends with `# EOF`,
//! types counters under their names without `_total` and states units in `# UNIT` lines). The
//! series are those `egpu-host` collects, under the same names and labels in both formats.

use std::sync::Arc;

use egpu::host::builtin::{Builtin, Kind, Metric, MetricsOptions, Value, metrics};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use super::{Exporter, Health};

/// The `Content-Type` of OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A registry holding the exporter's collector: made once, encoded on every scrape.
pub(super) fn registry(exporter: Arc<Exporter>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(exporter)));
    registry
}

/// Encodes a scrape in the format `accept` (the request's `Accept` header) prefers: OpenMetrics
/// when it names it, else the text format 0.0.4. Returns the body and its `Content-Type`.
pub(super) fn render(registry: &Registry, accept: Option<&str>) -> (String, &'static str) {
    let mut body = String::new();
    let openmetrics = accept.is_some_and(|a| a.contains("application/openmetrics-text"));
    let (result, content_type) = if openmetrics {
        (prometheus_client::encoding::text::encode(&mut body, registry), OPENMETRICS)
    } else {
        (
            prometheus_client::encoding::prometheus_text::encode(&mut body, registry),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    };
    if let Err(e) = result {
        // Writing to a `String` fails only if an encoder refused a value: say so in the body.
        body = format!("# egpu: encoding the metrics failed: {e}\n");
    }
    (body, content_type)
}

/// The collector of one scrape: the exporter's health and processes, read when encoded.
#[derive(Debug)]
struct Scrape(Arc<Exporter>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let (processes, health) = self.0.scrape();
        encode_health(&health, &mut encoder)?;
        encode_builtin(&processes, self.0.options, &mut encoder)
    }
}

/// egpu's own series: there from the first scrape on, whether or not a process was seen.
fn encode_health(h: &Health, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    encoder
        .encode_descriptor(
            "egpu_build",
            "The egpu that serves these metrics.",
            None,
            MetricType::Info,
        )?
        .encode_info(&version)?;
    let seconds = Unit::Seconds;
    let started = h.started.as_secs_f64();
    ConstGauge::new(started).encode(encoder.encode_descriptor(
        "egpu_start_time",
        "When egpu run started, in seconds since the Unix epoch.",
        Some(&seconds),
        MetricType::Gauge,
    )?)?;
    ConstCounter::new(h.scrapes).encode(encoder.encode_descriptor(
        "egpu_metrics_scrapes",
        "Scrapes of these metrics served, this one included.",
        None,
        MetricType::Counter,
    )?)?;
    ConstCounter::new(h.seen).encode(encoder.encode_descriptor(
        "egpu_processes_seen",
        "Processes under egpu run whose egpu maps were found (each keeps its series after it \
         exits).",
        None,
        MetricType::Counter,
    )?)?;
    ConstGauge::new(h.running as i64).encode(encoder.encode_descriptor(
        "egpu_processes_running",
        "Processes seen that are still running.",
        None,
        MetricType::Gauge,
    )?)?;
    ConstGauge::new(i64::from(h.exit.is_none())).encode(encoder.encode_descriptor(
        "egpu_command_running",
        "1 while the command egpu run started runs, 0 after (while the metrics linger).",
        None,
        MetricType::Gauge,
    )?)?;
    if let Some(status) = h.exit {
        ConstGauge::new(status).encode(encoder.encode_descriptor(
            "egpu_command_exit_status",
            "The exit status of the command (128 + N for signal N), which egpu run exits with.",
            None,
            MetricType::Gauge,
        )?)?;
    }
    Ok(())
}

/// The name, unit and type `prometheus-client` is given for a metric, so that it writes the
/// metric's Prometheus name: counters without `_total` (which it appends), a unit's word apart
/// (which it appends before, and states in OpenMetrics' `# UNIT` line).
fn descriptor(m: &Metric) -> (&'static str, Option<Unit>, MetricType) {
    let (base, kind) = match m.kind {
        Kind::Counter => {
            (m.prometheus.strip_suffix("_total").unwrap_or(m.prometheus), MetricType::Counter)
        }
        Kind::Histogram => (m.prometheus, MetricType::Histogram),
        Kind::Gauge => (m.prometheus, MetricType::Gauge),
    };
    for (suffix, unit) in [("_bytes", Unit::Bytes), ("_seconds", Unit::Seconds)] {
        if let Some(name) = base.strip_suffix(suffix) {
            return (name, Some(unit), kind);
        }
    }
    (base, None, kind)
}

/// The built-in metrics of `processes`, a series per process (and label values).
fn encode_builtin(
    processes: &[Builtin],
    options: MetricsOptions,
    encoder: &mut DescriptorEncoder<'_>,
) -> std::fmt::Result {
    for m in metrics(processes, options) {
        let (name, unit, kind) = descriptor(&m);
        let mut family = encoder.encode_descriptor(name, m.help, unit.as_ref(), kind)?;
        for p in &m.points {
            let labels: Vec<(&str, &str)> =
                p.attributes.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut series = family.encode_family(&labels)?;
            match &p.value {
                Value::Counter(n) => ConstCounter::new(*n).encode(series)?,
                Value::Total(x) => ConstCounter::new(*x).encode(series)?,
                Value::Gauge(x) => ConstGauge::new(*x).encode(series)?,
                Value::Histogram(h) => {
                    let mut buckets: Vec<(f64, u64)> =
                        (0u32..).zip(&h.buckets).map(|(b, n)| (h.bound(b), *n)).collect();
                    // Values past the last bound.
                    let seen: u64 = h.buckets.iter().sum();
                    buckets.push((f64::INFINITY, h.count.saturating_sub(seen)));
                    series.encode_histogram::<NoLabelSet>(
                        h.scaled_sum(),
                        h.count,
                        &buckets,
                        None,
                    )?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "prometheus_tests.rs"]
mod tests;
