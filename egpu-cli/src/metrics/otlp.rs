//! `egpu run --otlp`: pushing the descendants' metrics to an OpenTelemetry collector every so
//! often and once more at the end ([`OtlpPusher`]), as an OTLP/HTTP export request in JSON
//! (`egpu-host` renders it) or protobuf ([`protobuf`]: the few OTLP messages needed, derived with
//! `prost`, from the same list of metrics), and the launch spans of the processes' span rings
//! ([`traces`], OTLP/HTTP protobuf to `/v1/traces`) with each push.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use egpu::host::builtin::{self, MetricsOptions};
use egpu::host::otlp::Endpoint;

use super::Descendants;
use crate::args::OtlpProtocol as Protocol;

/// Pushes the descendants' metrics to an OTLP collector every so often, from a thread of its
/// own, and once more at the end.
#[derive(Clone)]
pub(crate) struct OtlpPusher {
    endpoint: Endpoint,
    /// Where the spans go: the endpoint's `/v1/metrics` as `/v1/traces`.
    traces: Endpoint,
    protocol: Protocol,
    options: MetricsOptions,
    start_ns: u64,
    /// The last error said, so that a collector that is down is reported once, not every time.
    said: Arc<Mutex<String>>,
    /// The same, for the spans.
    said_spans: Arc<Mutex<String>>,
    /// Held across each push; true once the last push is made, after which the periodic pushes
    /// stop (so none taken before it arrives after it).
    finished: Arc<Mutex<bool>>,
}

impl OtlpPusher {
    pub(crate) fn start(
        endpoint: Endpoint,
        protocol: Protocol,
        every: Duration,
        options: MetricsOptions,
        descendants: &Descendants,
    ) -> OtlpPusher {
        eprintln!("egpu: pushing metrics to {endpoint} every {every:?}");
        let traces = traces_endpoint(&endpoint);
        let pusher = OtlpPusher {
            endpoint,
            traces,
            protocol,
            options,
            start_ns: unix_ns(),
            said: Default::default(),
            said_spans: Default::default(),
            finished: Default::default(),
        };
        let (me, descendants) = (pusher.clone(), descendants.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(every);
                let finished = me.finished.lock().unwrap_or_else(|p| p.into_inner());
                if *finished {
                    return;
                }
                me.push(&descendants);
            }
        });
        pusher
    }

    fn push(&self, descendants: &Descendants) {
        let processes = descendants.snapshot();
        let now = unix_ns();
        let (body, content_type) = match self.protocol {
            Protocol::Json => (
                builtin::otlp_json(&processes, self.options, self.start_ns, now).into_bytes(),
                egpu::host::otlp::JSON,
            ),
            Protocol::Protobuf => (
                protobuf::request(&processes, self.options, self.start_ns, now),
                egpu::host::otlp::PROTOBUF,
            ),
        };
        let result =
            egpu::host::otlp::post_as(&self.endpoint, &body, content_type, Duration::from_secs(5));
        report(&self.said, "metrics", result);
        // The spans written since the last push (a push that fails loses them).
        if let Some(spans) = traces::take(descendants) {
            let body = traces::encode(&spans);
            let (protobuf, timeout) = (egpu::host::otlp::PROTOBUF, Duration::from_secs(5));
            let result = egpu::host::otlp::post_as(&self.traces, &body, protobuf, timeout);
            report(&self.said_spans, "spans", result);
        }
    }

    /// The last push: after any periodic one under way, and none after it.
    pub(crate) fn finish(self, descendants: &Descendants) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        *finished = true;
        self.push(descendants);
    }
}

/// Now, in nanoseconds since the Unix epoch.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Says an error pushing `what`, once until a push succeeds or the error changes (`said`: the
/// last said).
fn report(said: &Mutex<String>, what: &str, result: Result<(), egpu::host::otlp::OtlpError>) {
    let mut said = said.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(()) => said.clear(),
        Err(e) if e.to_string() != *said => {
            eprintln!("egpu: pushing {what}: {e}");
            *said = e.to_string();
        }
        Err(_) => {}
    }
}

/// Where spans go for metrics going to `endpoint`: its path's `/v1/metrics` ending as
/// `/v1/traces`, else `/v1/traces`.
fn traces_endpoint(endpoint: &Endpoint) -> Endpoint {
    let mut traces = endpoint.clone();
    traces.path = match endpoint.path.strip_suffix("/v1/metrics") {
        Some(base) => format!("{base}/v1/traces"),
        None => "/v1/traces".into(),
    };
    traces
}

pub(crate) mod protobuf;
pub(crate) mod traces;
