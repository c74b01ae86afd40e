//! OTLP/HTTP protobuf traces: the launch spans the preloaded library writes to each process's
//! span ring (`egpu::host::spans`), read by [`take`] through the rings [`Descendants`] holds, and encoded as an
//! `ExportTraceServiceRequest` (`opentelemetry/proto/collector/trace/v1`; the messages derived
//! with `prost` here, field numbers as in the `.proto` files, fields egpu never sets left out),
//! posted to `/v1/traces`.

use egpu::host::builtin::Builtin;
use egpu::host::spans::{CLOCK_GPU_EVENTS, CLOCK_HOST_CALL, SpanRecord};
use prost::Message as _;

use crate::metrics::Descendants;

use super::protobuf::{Any, AnyValue, InstrumentationScope, KeyValue, Resource};

/// `ExportTraceServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) resource_spans: Vec<ResourceSpans>,
}

/// `ResourceSpans`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) scope_spans: Vec<ScopeSpans>,
}

/// `ScopeSpans`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) spans: Vec<Span>,
}

/// `Span`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) span_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub(crate) parent_span_id: Vec<u8>,
    #[prost(string, tag = "5")]
    pub(crate) name: String,
    #[prost(int32, tag = "6")]
    pub(crate) kind: i32,
    #[prost(fixed64, tag = "7")]
    pub(crate) start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub(crate) end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(message, optional, tag = "15")]
    pub(crate) status: Option<Status>,
}

/// `Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Status {
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    #[prost(int32, tag = "3")]
    pub(crate) code: i32,
}

/// `Span.SpanKind.SPAN_KIND_INTERNAL`: a launch is work inside the process.
pub(crate) const INTERNAL: i32 = 1;
/// `Status.StatusCode.STATUS_CODE_ERROR`.
pub(crate) const ERROR: i32 = 2;

/// The spans the descendants wrote since the last call, as an export request; `None` when
/// there are none.
pub(crate) fn take(descendants: &Descendants) -> Option<ExportTraceServiceRequest> {
    let resource_spans: Vec<ResourceSpans> = descendants
        .take_spans()
        .iter()
        .map(|(b, records)| resource(b.pid, records.iter().map(|r| span(b, r)).collect()))
        .collect();
    (!resource_spans.is_empty()).then_some(ExportTraceServiceRequest { resource_spans })
}

/// `processes`' resource (as the metrics': `service.name` egpu, `process.pid`) with `spans`.
fn resource(pid: u32, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![string("service.name", "egpu"), int("process.pid", i64::from(pid))],
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "egpu".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            }),
            spans,
        }],
    }
}

/// A launch's span: named by its kernel, parented by the thread's span.
pub(crate) fn span(b: &Builtin, r: &SpanRecord) -> Span {
    let mut name = b.name(r.kernel);
    if name.is_empty() {
        name = "(unnamed)".into();
    }
    let trace: Vec<u8> = r.trace_id.iter().flat_map(|w| w.to_be_bytes()).collect();
    let mut attributes = vec![string("gpu.cuda.kernel.name", &name)];
    let clock = match r.clock {
        CLOCK_HOST_CALL => "host_call",
        CLOCK_GPU_EVENTS => "gpu_events",
        _ => "unknown",
    };
    attributes.push(string("egpu.span.clock", clock));
    if r.site_id != 0 {
        attributes.push(string("egpu.site_id", &r.site_id.to_string()));
    }
    if r.tag_id != 0 {
        attributes.push(match i64::try_from(r.tag_id) {
            Ok(tag) => int("egpu.tag_id", tag),
            Err(_) => string("egpu.tag_id", &r.tag_id.to_string()),
        });
    }
    let status = (r.result != 0)
        .then(|| Status { message: format!("CUresult {}", r.result as i32), code: ERROR });
    Span {
        trace_id: trace,
        span_id: r.span_id.to_be_bytes().to_vec(),
        parent_span_id: if r.parent_span_id == 0 {
            Vec::new()
        } else {
            r.parent_span_id.to_be_bytes().to_vec()
        },
        name,
        kind: INTERNAL,
        start_time_unix_nano: r.start_ns,
        end_time_unix_nano: r.end_ns.max(r.start_ns),
        attributes,
        status,
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(Any::StringValue(value.into())) }),
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(Any::IntValue(value)) }) }
}

/// `request`, encoded: the body of a `POST /v1/traces` as `application/x-protobuf`.
pub(crate) fn encode(request: &ExportTraceServiceRequest) -> Vec<u8> {
    request.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use egpu::host::otlp::Endpoint;
    use prost::Message as _;

    use super::*;
    use crate::metrics::fixture::filled;

    /// A record's span, through the wire form: ids big-endian, a launch the driver refused as
    /// an error, no parent when the thread had no span, the end never before the start.
    #[test]
    fn a_record_becomes_a_span() {
        let b = filled();
        let r = SpanRecord {
            trace_id: [0x0102_0304_0506_0708, 0x090a_0b0c_0d0e_0f10],
            span_id: 0x1112_1314_1516_1718,
            start_ns: 5,
            end_ns: 4,
            clock: CLOCK_HOST_CALL,
            tag_id: u64::MAX,
            result: 1,
            ..Default::default()
        };
        let sent =
            ExportTraceServiceRequest { resource_spans: vec![resource(b.pid, vec![span(&b, &r)])] };
        let got = ExportTraceServiceRequest::decode(encode(&sent).as_slice()).expect("a request");
        assert_eq!(got, sent);
        let s = &got.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(s.trace_id, (1..=16).collect::<Vec<u8>>());
        assert_eq!(s.span_id, (0x11..=0x18).collect::<Vec<u8>>());
        assert!(s.parent_span_id.is_empty());
        assert_eq!((s.name.as_str(), s.kind), ("(unnamed)", INTERNAL));
        assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (5, 5));
        assert_eq!(s.status.as_ref().map(|s| s.code), Some(ERROR));
        assert!(s.attributes.contains(&string("egpu.tag_id", &u64::MAX.to_string())));
        assert!(s.attributes.contains(&string("egpu.span.clock", "host_call")));
    }

    #[test]
    fn spans_go_beside_the_metrics() {
        let path = |url: &str| {
            let e: Endpoint = url.parse().expect("an endpoint");
            super::super::traces_endpoint(&e).path
        };
        assert_eq!(path("http://127.0.0.1:4318"), "/v1/traces");
        assert_eq!(path("http://collector:4318/otlp/v1/metrics"), "/otlp/v1/traces");
        assert_eq!(path("http://collector:4318/ingest"), "/v1/traces");
    }
}
