//! OTLP/HTTP protobuf: the messages of `opentelemetry/proto/collector/metrics/v1` that an export
//! request of egpu's metrics uses, derived with `prost` (field numbers as in the `.proto` files;
//! fields egpu never sets are left out, which protobuf allows), and [`request`], which encodes
//! the same metrics, resources and times as `egpu-host`'s JSON.

use egpu::host::builtin::{Builtin, Kind, MetricsOptions, Value, metrics, otel_key};
use prost::Message as _;

/// `ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) resource_metrics: Vec<ResourceMetrics>,
}

/// `ResourceMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub(crate) resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub(crate) attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub(crate) scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) metrics: Vec<Metric>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<AnyValue>,
}

/// `AnyValue`: a string or an integer here.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnyValue {
    #[prost(oneof = "Any", tags = "1, 3")]
    pub(crate) value: Option<Any>,
}

/// `AnyValue.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Any {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(int64, tag = "3")]
    IntValue(i64),
}

/// `Metric`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Metric {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) description: String,
    #[prost(string, tag = "3")]
    pub(crate) unit: String,
    #[prost(oneof = "Data", tags = "5, 7, 9")]
    pub(crate) data: Option<Data>,
}

/// `Metric.data`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Histogram),
}

/// `Gauge`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub(crate) data_points: Vec<NumberDataPoint>,
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub(crate) const CUMULATIVE: i32 = 2;

/// `Sum`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub(crate) data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub(crate) aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub(crate) is_monotonic: bool,
}

/// `Histogram`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub(crate) data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    pub(crate) aggregation_temporality: i32,
}

/// `NumberDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub(crate) start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub(crate) time_unix_nano: u64,
    #[prost(oneof = "Number", tags = "4, 6")]
    pub(crate) value: Option<Number>,
}

/// `NumberDataPoint.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Number {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

/// `HistogramDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub(crate) start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub(crate) time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub(crate) count: u64,
    #[prost(double, optional, tag = "5")]
    pub(crate) sum: Option<f64>,
    #[prost(fixed64, repeated, tag = "6")]
    pub(crate) bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    pub(crate) explicit_bounds: Vec<f64>,
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(Any::StringValue(value.into())) }),
    }
}

/// The export request of `processes`' metrics: one resource per process (`service.name` egpu,
/// `process.pid`), cumulative, sums monotonic, histograms with explicit bounds `2^b - 1` and a
/// last bucket past them; `start_ns` and `now_ns` the points' times (Unix nanoseconds).
pub(crate) fn message(
    processes: &[Builtin],
    options: MetricsOptions,
    start_ns: u64,
    now_ns: u64,
) -> ExportMetricsServiceRequest {
    let all = metrics(processes, options);
    let mut resource_metrics = Vec::new();
    for b in processes {
        let pid = b.pid.to_string();
        let mut rendered = Vec::new();
        for m in &all {
            let mine = m.points.iter().filter(|p| p.attributes.first().is_some_and(|a| a.1 == pid));
            let (mut numbers, mut histograms) = (Vec::new(), Vec::new());
            for p in mine {
                let attributes: Vec<KeyValue> =
                    p.attributes[1..].iter().map(|(k, v)| string(&otel_key(k), v)).collect();
                match &p.value {
                    Value::Counter(n) => numbers.push(NumberDataPoint {
                        attributes,
                        start_time_unix_nano: start_ns,
                        time_unix_nano: now_ns,
                        value: Some(Number::AsInt(i64::try_from(*n).unwrap_or(i64::MAX))),
                    }),
                    Value::Gauge(x) | Value::Total(x) => numbers.push(NumberDataPoint {
                        attributes,
                        start_time_unix_nano: start_ns,
                        time_unix_nano: now_ns,
                        value: Some(Number::AsDouble(*x)),
                    }),
                    Value::Histogram(h) => {
                        let seen: u64 = h.buckets.iter().sum();
                        let mut bucket_counts = h.buckets.clone();
                        bucket_counts.push(h.count.saturating_sub(seen));
                        histograms.push(HistogramDataPoint {
                            attributes,
                            start_time_unix_nano: start_ns,
                            time_unix_nano: now_ns,
                            count: h.count,
                            sum: Some(h.scaled_sum()),
                            bucket_counts,
                            explicit_bounds: (0..h.buckets.len() as u32)
                                .map(|b| h.bound(b))
                                .collect(),
                        });
                    }
                }
            }
            if numbers.is_empty() && histograms.is_empty() {
                continue;
            }
            let data = match m.kind {
                Kind::Counter => Data::Sum(Sum {
                    data_points: numbers,
                    aggregation_temporality: CUMULATIVE,
                    is_monotonic: true,
                }),
                Kind::Gauge => Data::Gauge(Gauge { data_points: numbers }),
                Kind::Histogram => Data::Histogram(Histogram {
                    data_points: histograms,
                    aggregation_temporality: CUMULATIVE,
                }),
            };
            rendered.push(Metric {
                name: m.otel.into(),
                description: m.help.into(),
                unit: m.unit.into(),
                data: Some(data),
            });
        }
        let pid = KeyValue {
            key: "process.pid".into(),
            value: Some(AnyValue { value: Some(Any::IntValue(i64::from(b.pid))) }),
        };
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource { attributes: vec![string("service.name", "egpu"), pid] }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "egpu".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                metrics: rendered,
            }],
        });
    }
    ExportMetricsServiceRequest { resource_metrics }
}

/// [`message`], encoded: the body of a `POST /v1/metrics` as `application/x-protobuf`.
pub(crate) fn request(
    processes: &[Builtin],
    options: MetricsOptions,
    start_ns: u64,
    now_ns: u64,
) -> Vec<u8> {
    message(processes, options, start_ns, now_ns).encode_to_vec()
}

#[cfg(test)]
#[path = "protobuf_tests.rs"]
mod tests;
